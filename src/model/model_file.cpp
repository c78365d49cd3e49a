#include "pagedkv/model/model_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {
namespace {

// A llama2.c checkpoint's tokenizer, where llama2.c keeps it: tok<vocab>.bin (its trained
// vocabularies, e.g. tok512.bin beside stories260K.bin) or tokenizer.bin beside the checkpoint.
std::string tokenizer_beside(const std::string& checkpoint, int vocab_size) {
  const std::filesystem::path dir = std::filesystem::path(checkpoint).parent_path();
  std::vector<std::string> looked;
  for (const std::string& name : {fmt::format("tok{}.bin", vocab_size), std::string("tokenizer.bin")}) {
    const std::filesystem::path candidate = dir / name;
    if (std::filesystem::is_regular_file(candidate)) return candidate.string();
    looked.push_back(candidate.string());
  }
  throw ConfigError(fmt::format("the llama2.c checkpoint '{}' needs its tokenizer: none at {} or {}; pass --tokenizer",
                                checkpoint, looked[0], looked[1]));
}

}  // namespace

LoadedModel load_model_file(const std::string& model_path, const std::string& tokenizer_given,
                            const ModelFileOptions& options) {
  std::string tokenizer_path = tokenizer_given;
  LoadedModel out;
  out.is_gguf = GgufFile::has_gguf_magic(model_path);
  if (out.is_gguf) {
    auto model = std::make_unique<GgufModel>(model_path, options.context_length);
    if (tokenizer_path.empty()) {
      try {
        out.tokenizer = make_gguf_tokenizer(model->file());
      } catch (const FormatError& e) {
        out.tokenizer_error = e.what();
      }
    }
    if (model->file().find("tokenizer.chat_template") && out.chat_template.empty())
      out.chat_template = model->file().get_string("tokenizer.chat_template");
    out.model = std::move(model);
  } else {
    out.model = std::make_unique<Llama2cCheckpoint>(model_path);
    if (tokenizer_path.empty()) tokenizer_path = tokenizer_beside(model_path, out.model->config().vocab_size);
  }
  const int vocab = out.model->config().vocab_size;
  if (!tokenizer_path.empty()) {
    if (GgufFile::has_gguf_magic(tokenizer_path)) {
      const GgufFile file(tokenizer_path);
      out.tokenizer = make_gguf_tokenizer(file);
      if (file.find("tokenizer.chat_template")) out.chat_template = file.get_string("tokenizer.chat_template");
    } else {
      out.tokenizer = std::make_unique<Tokenizer>(tokenizer_path, vocab);
    }
  }
  if (out.tokenizer && out.tokenizer->vocab_size() > vocab)
    throw ConfigError(fmt::format("the tokenizer has {} tokens, more than the model's vocabulary of {}",
                                  out.tokenizer->vocab_size(), vocab));
  return out;
}

}  // namespace pagedkv
