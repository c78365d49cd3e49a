// The parsed form of a template: expressions and statements as jinja2's parser builds them. The
// tree is immutable once parsed and shared by every render of its Template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pagedkv/template/value.h"

namespace pagedkv::jinja::ast {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kLiteral,  // literal: a constant (also lists and dicts whose items are all constants)
  kName,  // name
  kList,  // operands: the items
  kTuple,  // operands: the items
  kDict,  // operands: key, value, key, value, ...
  kNeg,  // -target
  kPos,  // +target
  kNot,  // not target
  kAnd,  // operands[0] and operands[1]
  kOr,  // operands[0] or operands[1]
  kBinary,  // operands[0] binary_op operands[1]
  kConcat,  // operands joined with ~
  kCompare,  // operands[0] compare_ops[0] operands[1] compare_ops[1] operands[2] ... (a chain)
  kCondition,  // operands: then-value, condition, else-value (null: undefined)
  kGetAttr,  // target.name: attribute first, then item
  kGetItem,  // target[operands[0]]: item first, then attribute
  kSlice,  // target[operands[0]:operands[1]:operands[2]] (each may be null)
  kCall,  // target(operands..., keywords...)
  kFilter,  // target | name(operands..., keywords...); target null inside {% filter %} / {% set %} blocks
  kTest,  // target is [not] name(operands...)
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  int line;
  Value literal;
  std::string name;
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  bool negated = false;  // kTest: "is not"
  ExprPtr target;
  std::vector<ExprPtr> operands;
  std::vector<Keyword> keywords;
};

enum class StmtKind {
  kText,  // text: output as is
  kOutput,  // {{ expr }}
  kIf,  // branches: (condition, body)...; else_body
  kFor,  // for targets in expr [if condition]: body [else: else_body]
  kSet,  // set targets = expr, or set targets[0].attribute = expr
  kSetBlock,  // set targets[0] [| filter]: body
  kMacro,  // macro name(params): body
  kCallBlock,  // call(params) expr: body (the body is the macro's caller())
  kFilterBlock,  // filter filter: body
  kBreak,
  kContinue,
  kScope,  // with assignments: body; also generation: body (no assignments)
};

struct Parameter {
  std::string name;
  ExprPtr default_value;  // null: none given (an omitted argument is undefined)
};

struct Stmt {
  StmtKind kind;
  int line;
  std::string text;
  ExprPtr expr;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attribute;
  ExprPtr condition;
  std::string name;
  std::vector<Parameter> params;
  ExprPtr filter;  // a kFilter chain applied to the body's text (its innermost target is null)
  std::vector<std::pair<std::string, ExprPtr>> assignments;
  bool uses_loop_variable = false;  // kFor: the body names `loop` (else it is not built)
};

struct Program {
  Body body;
};

}  // namespace pagedkv::jinja::ast
