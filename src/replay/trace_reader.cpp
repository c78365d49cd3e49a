#include "pagedkv/replay/trace_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

using Json = nlohmann::json;

// Synthetic token values must fit a TokenId and never repeat for distinct content.
constexpr int64_t kMaxTokenValue = std::numeric_limits<TokenId>::max();

// A record that cannot be used; carries the reason, the reader adds file and line.
struct BadRecord {
  std::string reason;
};

std::string read_all(std::istream& in) {
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

// Calls f(line, line_number) for each line of `text` (1-based, '\r' stripped).
template <typename F>
void for_each_line(std::string_view text, F&& f) {
  int32_t number = 0;
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!f(line, ++number)) return;
  }
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t'; });
}

// Skips or rethrows a bad record depending on `lenient`.
class BadLinePolicy {
 public:
  BadLinePolicy(const std::string& name, bool lenient, Trace& trace) : name_(name), lenient_(lenient), trace_(trace) {}
  void handle(const BadRecord& bad, int32_t line) {
    if (!lenient_) throw FormatError(fmt::format("{}:{}: {}", name_, line, bad.reason));
    ++trace_.skipped_lines;
  }

 private:
  const std::string& name_;
  bool lenient_;
  Trace& trace_;
};

Json parse_json_object(std::string_view line) {
  Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw BadRecord{"not valid JSON"};
  if (!j.is_object()) throw BadRecord{"a record must be a JSON object"};
  return j;
}

const Json* find_field(const Json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

int64_t integer_field(const Json& j, const char* key, int64_t min, int64_t max, std::optional<int64_t> fallback = {}) {
  const Json* v = find_field(j, key);
  if (v == nullptr) {
    if (fallback) return *fallback;
    throw BadRecord{fmt::format("missing field \"{}\"", key)};
  }
  int64_t x = 0;
  if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
             std::abs(v->get<double>()) < 9.0e15) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    throw BadRecord{fmt::format("field \"{}\" must be an integer, got {}", key, v->dump())};
  }
  if (x < min || x > max) throw BadRecord{fmt::format("field \"{}\" = {} is outside [{}, {}]", key, x, min, max)};
  return x;
}

double timestamp_field(const Json& j, double fallback) {
  const Json* v = find_field(j, "timestamp");
  if (v == nullptr) return fallback;
  if (!v->is_number()) throw BadRecord{fmt::format("field \"timestamp\" must be a number, got {}", v->dump())};
  const double t = v->get<double>();
  if (!std::isfinite(t) || t < 0) throw BadRecord{fmt::format("field \"timestamp\" = {} must be finite and >= 0", t)};
  return t;
}

void add_request(Trace& trace, TraceRequest r) {
  trace.total_input_tokens += r.input_tokens;
  trace.total_output_tokens += r.output_tokens;
  trace.requests.push_back(r);
}

// The fields every JSON-lines record shares: its line, its arrival (a missing timestamp repeats
// the previous request's) and its output length (default 0).
TraceRequest json_record_header(const Json& j, int32_t line, const Trace& trace) {
  TraceRequest r;
  r.line = line;
  r.arrival_ms = timestamp_field(j, trace.requests.empty() ? 0.0 : trace.requests.back().arrival_ms);
  r.output_tokens = static_cast<int32_t>(integer_field(j, "output_length", 0, std::numeric_limits<int32_t>::max(), 0));
  if (auto it = j.find("latency_ms"); it != j.end() && !it->is_null()) {
    if (!it->is_number()) throw BadRecord{fmt::format("field \"latency_ms\" must be a number, got {}", it->dump())};
    const double l = it->get<double>();
    if (!std::isfinite(l) || l < 0)
      throw BadRecord{fmt::format("field \"latency_ms\" = {} must be finite and >= 0", l)};
    r.latency_ms = l;
  }
  return r;
}

bool reached_limit(const Trace& trace, const TraceReadOptions& o) {
  return o.limit > 0 && static_cast<int64_t>(trace.requests.size()) >= o.limit;
}

Trace parse_mooncake(std::string_view text, const std::string& name, const TraceReadOptions& options) {
  Trace trace;
  trace.name = name;
  trace.format = TraceFormat::kMooncake;
  BadLinePolicy bad_lines(name, options.lenient, trace);
  // Trace ids are remapped to dense ids in first-seen order (the identity for the released
  // Mooncake traces); dense id d, offset p holds token value d * 512 + p.
  std::unordered_map<uint64_t, uint32_t> dense_ids;
  dense_ids.reserve(1 << 12);  // grows with the trace; a large reserve cost every small read ~2 MB of zeroing
  std::vector<uint64_t> ids;
  for_each_line(text, [&](std::string_view line, int32_t number) {
    if (blank(line)) return true;
    try {
      const Json j = parse_json_object(line);
      TraceRequest r = json_record_header(j, number, trace);
      r.input_tokens = static_cast<int32_t>(integer_field(j, "input_length", 1, std::numeric_limits<int32_t>::max()));
      const Json* h = find_field(j, "hash_ids");
      if (h == nullptr) throw BadRecord{"missing field \"hash_ids\""};
      if (!h->is_array()) throw BadRecord{"field \"hash_ids\" must be an array of integers"};
      ids.clear();
      for (const Json& id : *h) {
        if (id.is_number_unsigned()) ids.push_back(id.get<uint64_t>());
        else if (id.is_number_integer() && id.get<int64_t>() >= 0)
          ids.push_back(static_cast<uint64_t>(id.get<int64_t>()));
        else throw BadRecord{fmt::format("hash id {} is not a non-negative integer", id.dump())};
      }
      const int64_t expected = (int64_t{r.input_tokens} + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens;
      if (static_cast<int64_t>(ids.size()) != expected)
        throw BadRecord{fmt::format("{} hash ids for input_length {}: expected ceil({}/{}) = {}", ids.size(),
                                    r.input_tokens, r.input_tokens, kMooncakeBlockTokens, expected)};
      r.first_run = static_cast<uint32_t>(trace.runs.size());
      r.num_runs = static_cast<uint32_t>(ids.size());
      int32_t left = r.input_tokens;
      for (uint64_t id : ids) {
        auto [it, inserted] = dense_ids.try_emplace(id, static_cast<uint32_t>(dense_ids.size()));
        const int64_t first = int64_t{it->second} * kMooncakeBlockTokens;
        if (first + kMooncakeBlockTokens - 1 > kMaxTokenValue)
          throw FormatError(
              fmt::format("{}:{}: more than {} distinct hash ids; their token values no longer fit "
                          "a 32-bit token id",
                          name, number, (kMaxTokenValue + 1) / kMooncakeBlockTokens));
        const int32_t len = std::min(left, kMooncakeBlockTokens);
        trace.runs.push_back(ContentRun{first, len, false});
        left -= len;
      }
      add_request(trace, r);
    } catch (const BadRecord& bad) {
      bad_lines.handle(bad, number);
    }
    return !reached_limit(trace, options);
  });
  trace.distinct_hash_ids = static_cast<int64_t>(dense_ids.size());
  return trace;
}

Trace parse_tokens(std::string_view text, const std::string& name, const TraceReadOptions& options) {
  Trace trace;
  trace.name = name;
  trace.format = TraceFormat::kTokens;
  BadLinePolicy bad_lines(name, options.lenient, trace);
  std::vector<TokenId> tokens;
  for_each_line(text, [&](std::string_view line, int32_t number) {
    if (blank(line)) return true;
    try {
      const Json j = parse_json_object(line);
      TraceRequest r = json_record_header(j, number, trace);
      const Json* t = find_field(j, "tokens");
      if (t == nullptr) throw BadRecord{"missing field \"tokens\""};
      if (!t->is_array() || t->empty()) throw BadRecord{"field \"tokens\" must be a non-empty array of token ids"};
      tokens.clear();
      for (const Json& tok : *t) {
        if (!tok.is_number_integer() || tok.get<int64_t>() < 0 || tok.get<int64_t>() > kMaxTokenValue)
          throw BadRecord{fmt::format("token {} is not an integer in [0, {}]", tok.dump(), kMaxTokenValue)};
        tokens.push_back(static_cast<TokenId>(tok.get<int64_t>()));
      }
      if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) throw BadRecord{"prompt too long"};
      r.input_tokens = static_cast<int32_t>(tokens.size());
      r.first_run = static_cast<uint32_t>(trace.runs.size());
      r.num_runs = 1;
      trace.runs.push_back(ContentRun{static_cast<int64_t>(trace.explicit_tokens.size()), r.input_tokens, true});
      trace.explicit_tokens.insert(trace.explicit_tokens.end(), tokens.begin(), tokens.end());
      add_request(trace, r);
    } catch (const BadRecord& bad) {
      bad_lines.handle(bad, number);
    }
    return !reached_limit(trace, options);
  });
  return trace;
}

// ---- Azure CSV --------------------------------------------------------------------------------

// splitmix64: a tiny, fully specified generator, so the sharing model gives the same trace on
// every platform (std:: distributions are implementation-defined).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '"')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '"')) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t comma = line.find(',');
    out.push_back(trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return out;
    line.remove_prefix(comma + 1);
  }
}

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// A timestamp split so that differences keep the traces' 100 ns resolution (a double of
// milliseconds since 1970 only resolves about 0.2 us).
struct Timestamp {
  int64_t seconds = 0;  // since 1970-01-01, UTC assumed
  double fraction = 0;  // [0, 1)
};

// "YYYY-MM-DD HH:MM:SS[.fraction]"
std::optional<Timestamp> parse_timestamp(std::string_view s) {
  if (s.size() < 19 || s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' || s[16] != ':')
    return std::nullopt;
  auto field = [&](size_t pos, size_t len) { return parse_number<int>(s.substr(pos, len)); };
  const auto y = field(0, 4), mo = field(5, 2), d = field(8, 2), h = field(11, 2), mi = field(14, 2),
             sec = field(17, 2);
  if (!y || !mo || !d || !h || !mi || !sec) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h < 0 || *h > 23 || *mi < 0 || *mi > 59 || *sec < 0 || *sec > 60)
    return std::nullopt;
  Timestamp t;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) return std::nullopt;
    double scale = 0.1;
    for (char c : s.substr(20)) {
      if (c < '0' || c > '9') return std::nullopt;
      t.fraction += (c - '0') * scale;
      scale /= 10;
    }
  }
  t.seconds =
      days_from_civil(*y, static_cast<unsigned>(*mo), static_cast<unsigned>(*d)) * 86400 + *h * 3600 + *mi * 60 + *sec;
  return t;
}

Trace parse_azure(std::string_view text, const std::string& name, const TraceReadOptions& options) {
  const AzurePrefixModel& model = options.azure;
  model.validate();
  Trace trace;
  trace.name = name;
  trace.format = TraceFormat::kAzure;
  BadLinePolicy bad_lines(name, options.lenient, trace);

  // The shared prompts take the first token values; unique suffixes follow.
  SplitMix64 rng{model.seed};
  std::vector<int64_t> prompt_first(static_cast<size_t>(model.num_system_prompts));
  std::vector<int32_t> prompt_len(prompt_first.size());
  std::vector<double> zipf_cdf(prompt_first.size());
  int64_t next_value = 0;
  double zipf_total = 0;
  for (size_t k = 0; k < prompt_first.size(); ++k) {
    const auto span = static_cast<uint64_t>(model.max_prompt_tokens - model.min_prompt_tokens + 1);
    prompt_len[k] = model.min_prompt_tokens + static_cast<int32_t>(rng.next() % span);
    prompt_first[k] = next_value;
    next_value += prompt_len[k];
    zipf_total += 1.0 / std::pow(static_cast<double>(k + 1), model.zipf_exponent);
    zipf_cdf[k] = zipf_total;
  }
  for (double& c : zipf_cdf) c /= zipf_total;

  int col_time = -1, col_context = -1, col_generated = -1;
  size_t num_columns = 0;
  Timestamp first;
  bool header_seen = false;
  for_each_line(text, [&](std::string_view line, int32_t number) {
    if (blank(line)) return true;
    const auto cells = split_csv(line);
    if (!header_seen) {
      for (size_t c = 0; c < cells.size(); ++c) {
        if (cells[c] == "TIMESTAMP") col_time = static_cast<int>(c);
        else if (cells[c] == "ContextTokens") col_context = static_cast<int>(c);
        else if (cells[c] == "GeneratedTokens") col_generated = static_cast<int>(c);
      }
      if (col_time < 0 || col_context < 0 || col_generated < 0)
        throw FormatError(
            fmt::format("{}:{}: the header must name the columns TIMESTAMP, ContextTokens and "
                        "GeneratedTokens, got \"{}\"",
                        name, number, line));
      num_columns = cells.size();
      header_seen = true;
      return true;
    }
    // Both random draws happen for every record, so changing share_probability does not
    // reshuffle which prompt the other records get.
    const double u_share = rng.uniform();
    const double u_prompt = rng.uniform();
    try {
      if (cells.size() != num_columns)
        throw BadRecord{fmt::format("{} columns where the header has {}", cells.size(), num_columns)};
      const auto when = parse_timestamp(cells[static_cast<size_t>(col_time)]);
      if (!when)
        throw BadRecord{fmt::format("TIMESTAMP \"{}\" is not YYYY-MM-DD HH:MM:SS[.fraction]",
                                    cells[static_cast<size_t>(col_time)])};
      const auto context = parse_number<int32_t>(cells[static_cast<size_t>(col_context)]);
      if (!context || *context < 1)
        throw BadRecord{
            fmt::format("ContextTokens \"{}\" is not a positive integer", cells[static_cast<size_t>(col_context)])};
      const auto generated = parse_number<int32_t>(cells[static_cast<size_t>(col_generated)]);
      if (!generated || *generated < 0)
        throw BadRecord{fmt::format("GeneratedTokens \"{}\" is not a non-negative integer",
                                    cells[static_cast<size_t>(col_generated)])};
      if (trace.requests.empty()) first = *when;
      TraceRequest r;
      r.line = number;
      r.arrival_ms = std::max(0.0, static_cast<double>(when->seconds - first.seconds) * 1000.0 +
                                       (when->fraction - first.fraction) * 1000.0);
      r.input_tokens = *context;
      r.output_tokens = *generated;
      r.first_run = static_cast<uint32_t>(trace.runs.size());
      int32_t shared = 0;
      if (u_share < model.share_probability) {
        const size_t k =
            static_cast<size_t>(std::lower_bound(zipf_cdf.begin(), zipf_cdf.end(), u_prompt) - zipf_cdf.begin());
        const size_t kk = std::min(k, zipf_cdf.size() - 1);
        shared = std::min(prompt_len[kk], r.input_tokens);
        trace.runs.push_back(ContentRun{prompt_first[kk], shared, false});
      }
      if (r.input_tokens > shared) {
        if (next_value + (r.input_tokens - shared) - 1 > kMaxTokenValue)
          throw FormatError(
              fmt::format("{}:{}: the trace's unique prompt tokens no longer fit 32-bit token ids", name, number));
        trace.runs.push_back(ContentRun{next_value, r.input_tokens - shared, false});
        next_value += r.input_tokens - shared;
      }
      r.num_runs = static_cast<uint32_t>(trace.runs.size()) - r.first_run;
      add_request(trace, r);
    } catch (const BadRecord& bad) {
      bad_lines.handle(bad, number);
    }
    return !reached_limit(trace, options);
  });
  if (!header_seen) throw FormatError(fmt::format("{}: empty file, expected a CSV header", name));
  return trace;
}

std::string stem_of(const std::filesystem::path& path) { return path.stem().string(); }

TraceFormat detect_format(const std::filesystem::path& path, std::string_view text) {
  if (path.extension() == ".csv") return TraceFormat::kAzure;
  TraceFormat found = TraceFormat::kAuto;
  for_each_line(text, [&](std::string_view line, int32_t number) {
    if (blank(line)) return true;
    if (line.starts_with("TIMESTAMP")) {
      found = TraceFormat::kAzure;
      return false;
    }
    Json j = Json::parse(line.begin(), line.end(), nullptr, false);
    if (j.is_object() && j.contains("hash_ids")) found = TraceFormat::kMooncake;
    else if (j.is_object() && j.contains("tokens")) found = TraceFormat::kTokens;
    else
      throw FormatError(
          fmt::format("{}:{}: cannot tell the trace format: the first record has neither \"hash_ids\" "
                      "(Mooncake) nor \"tokens\" (pagedkv JSONL); pass --format",
                      path.string(), number));
    return false;
  });
  if (found == TraceFormat::kAuto) throw FormatError(fmt::format("{}: the trace is empty", path.string()));
  return found;
}

Trace parse(TraceFormat format, std::string_view text, const std::string& name, const TraceReadOptions& options) {
  switch (format) {
    case TraceFormat::kMooncake:
      return parse_mooncake(text, name, options);
    case TraceFormat::kAzure:
      return parse_azure(text, name, options);
    case TraceFormat::kTokens:
      return parse_tokens(text, name, options);
    case TraceFormat::kAuto:
      break;
  }
  throw UsageError("parse: the trace format must be resolved first");
}

}  // namespace

void AzurePrefixModel::validate() const {
  if (num_system_prompts < 1)
    throw ConfigError(fmt::format("azure prefix model: num_system_prompts must be >= 1, got {}", num_system_prompts));
  if (!(zipf_exponent >= 0) || !std::isfinite(zipf_exponent))
    throw ConfigError(fmt::format("azure prefix model: zipf_exponent must be >= 0, got {}", zipf_exponent));
  if (min_prompt_tokens < 1 || max_prompt_tokens < min_prompt_tokens)
    throw ConfigError(fmt::format("azure prefix model: prompt lengths need 1 <= min <= max, got [{}, {}]",
                                  min_prompt_tokens, max_prompt_tokens));
  if (!(share_probability >= 0 && share_probability <= 1))
    throw ConfigError(
        fmt::format("azure prefix model: share_probability must be in [0, 1], got {}", share_probability));
}

std::optional<TraceFormat> parse_trace_format(std::string_view s) {
  if (s == "auto") return TraceFormat::kAuto;
  if (s == "mooncake") return TraceFormat::kMooncake;
  if (s == "azure") return TraceFormat::kAzure;
  if (s == "tokens" || s == "pagedkv") return TraceFormat::kTokens;
  return std::nullopt;
}

std::optional<double> parse_azure_timestamp_ms(std::string_view s) {
  const auto t = parse_timestamp(s);
  if (!t) return std::nullopt;
  return (static_cast<double>(t->seconds) + t->fraction) * 1000.0;
}

Trace read_mooncake_trace(std::istream& in, const std::string& name, const TraceReadOptions& options) {
  return parse_mooncake(read_all(in), name, options);
}
Trace read_azure_trace(std::istream& in, const std::string& name, const TraceReadOptions& options) {
  return parse_azure(read_all(in), name, options);
}
Trace read_token_trace(std::istream& in, const std::string& name, const TraceReadOptions& options) {
  return parse_tokens(read_all(in), name, options);
}

Trace read_trace(const std::filesystem::path& path, const TraceReadOptions& options) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open trace {}", path.string()));
  const std::string text = read_all(in);
  const TraceFormat format = options.format == TraceFormat::kAuto ? detect_format(path, text) : options.format;
  // Errors name the file as given; tables and legends use the stem.
  Trace trace = parse(format, text, path.string(), options);
  trace.name = stem_of(path);
  return trace;
}

}  // namespace pagedkv
