// One step of beam search, apart from the engine that drives it: given each live beam's
// cumulative log-probability and the log-softmax of its next-token logits, the `width` best
// continuations (beam, token) by cumulative log-probability. The engine keeps the beams'
// sequences in the KV cache: a beam chosen once continues in place, a beam chosen m times
// forks m - 1 children that share its blocks (copy-on-write), a beam not chosen is dropped and
// its blocks freed.
#pragma once

#include <span>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

struct BeamCandidate {
  int beam = 0;  // index into the step's beams
  TokenId token = 0;
  double score = 0;  // the beam's cumulative log-probability plus the token's
};

// log_softmax of one logits row, in double (the beams' scores add many of them).
void log_softmax(std::span<const float> logits, std::vector<double>& out);

// The `width` best (beam, token) pairs, best first; ties go to the lower beam, then the lower
// token, so the choice is a pure function of the inputs. `logprobs[b]` is beam b's log_softmax
// row; every row has the same length. UsageError on mismatched sizes or width < 1.
std::vector<BeamCandidate> select_beams(std::span<const double> cumulative,
                                        std::span<const std::vector<double>> logprobs, int width);

}  // namespace pagedkv
