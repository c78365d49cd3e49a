// One entry point for "a model file": a llama2.c checkpoint (.bin) or a GGUF file, told apart by
// the GGUF magic, returned with the tokenizer that goes with it. The CLI (generate, serve) and the
// Python module load models through it.
#pragma once

#include <memory>
#include <string>

#include "pagedkv/model/model.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv {

struct ModelFileOptions {
  // > 0: replaces a GGUF file's context length (the model's seq_len), as llama.cpp's n_ctx does.
  // Ignored for llama2.c checkpoints, whose header fixes seq_len.
  int context_length = 0;
};

struct LoadedModel {
  std::unique_ptr<Model> model;
  // Null when there is none to use: a GGUF file whose tokenizer pagedkv cannot read (no
  // tokenizer keys, another tokenizer model, an unknown BPE pre-tokenizer) and no tokenizer_path.
  // Such a model is still served from token ids; tokenizer_error says why there is no tokenizer.
  std::unique_ptr<TextTokenizer> tokenizer;
  std::string tokenizer_error;
  // The file's tokenizer.chat_template (a Jinja source; empty if none): the server recognises the
  // common ones (api/chat_template.h).
  std::string chat_template;
  bool is_gguf = false;
};

// Loads `model_path`. The tokenizer comes from `tokenizer_path` when it is not empty (a llama2.c
// tok*.bin, or a GGUF file whose tokenizer.ggml.* keys are used), else from the GGUF model file
// itself; a llama2.c checkpoint without tokenizer_path takes tok<vocab>.bin or tokenizer.bin from
// its own directory (as llama2.c keeps them), else throws ConfigError naming both paths.
// Throws Error if a file cannot be read, FormatError if one is malformed or unsupported (naming
// the file and the problem), ConfigError if the tokenizer's vocabulary is larger than the model's.
LoadedModel load_model_file(const std::string& model_path, const std::string& tokenizer_path = "",
                            const ModelFileOptions& options = {});

}  // namespace pagedkv
