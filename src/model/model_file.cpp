#include "pagedkv/model/model_file.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/tokenizer/gguf_tokenizer.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv {

LoadedModel load_model_file(const std::string& model_path, const std::string& tokenizer_path,
                            const ModelFileOptions& options) {
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
    if (tokenizer_path.empty())
      throw ConfigError(fmt::format("the llama2.c checkpoint '{}' needs a tokenizer file (tok*.bin)", model_path));
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
