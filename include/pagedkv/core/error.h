// Errors. Expected outcomes (a full pool, a request that must wait) are values, not exceptions;
// exceptions are for contract violations by the caller (double free, unknown request) and for
// bad input (corrupt files, invalid configuration). Every message names what was wrong.
#pragma once

#include <stdexcept>
#include <string>

namespace pagedkv {

// Base of every exception pagedkv throws.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller broke an API contract (double free, unknown request id, zero-token allocation).
class UsageError : public Error {
 public:
  using Error::Error;
};

// A configuration value is out of range or inconsistent.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// An input file or record is malformed (truncated checkpoint, bad trace line, corrupt block).
class FormatError : public Error {
 public:
  using Error::Error;
};

// An internal invariant does not hold: a bug in pagedkv, reported by the checker.
class InvariantError : public Error {
 public:
  using Error::Error;
};

}  // namespace pagedkv
