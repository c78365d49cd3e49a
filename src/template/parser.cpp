#include "pagedkv/template/parser.h"

#include <fmt/format.h>

#include "pagedkv/template/lexer.h"
#include "pagedkv/template/template_error.h"

namespace pagedkv::jinja {

namespace {

using ast::Body;
using ast::CompareOp;
using ast::Expr;
using ast::ExprKind;
using ast::ExprPtr;
using ast::Stmt;
using ast::StmtKind;
using ast::StmtPtr;

ExprPtr make_expr(ExprKind kind, int line) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->line = line;
  return e;
}

StmtPtr make_stmt(StmtKind kind, int line) {
  auto s = std::make_unique<Stmt>();
  s->kind = kind;
  s->line = line;
  return s;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits) : tokens_(std::move(tokens)), limits_(limits) {}

  ast::Program run() {
    ast::Program program;
    program.body = parse_body({});
    return program;
  }

 private:
  // Counts nesting (blocks, sub-expressions): a source nested past the limit fails here instead of
  // exhausting the stack, in the parser or later in the renderer that walks the same tree.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > p.limits_.max_nesting_depth)
        throw TemplateLimitError(fmt::format("line {}: template nesting exceeds max_nesting_depth ({})", p.cur().line,
                                             p.limits_.max_nesting_depth),
                                 p.cur().line);
    }
    ~DepthGuard() { --p.depth_; }
  };

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }

  [[noreturn]] void fail(std::string_view what) const {
    throw TemplateSyntaxError(fmt::format("line {}: syntax error: {}", cur().line, what), cur().line);
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kText:
        return "text";
      case TokenType::kVarBegin:
        return "'{{'";
      case TokenType::kVarEnd:
        return "'}}'";
      case TokenType::kBlockBegin:
        return "'{%'";
      case TokenType::kBlockEnd:
        return "'%}'";
      case TokenType::kName:
        return fmt::format("'{}'", t.text);
      case TokenType::kString:
        return "a string";
      case TokenType::kInteger:
      case TokenType::kFloat:
        return "a number";
      case TokenType::kOperator:
        return fmt::format("'{}'", t.text);
      case TokenType::kEnd:
        return "the end of the template";
    }
    return "a token";
  }

  bool is_op(std::string_view op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(std::string_view name) const { return cur().type == TokenType::kName && cur().text == name; }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail(fmt::format("expected '%}}', got {}", describe(cur())));
    next();
  }
  std::string expect_name() {
    if (cur().type != TokenType::kName) fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string name = cur().text;
    next();
    return name;
  }

  // ---- statements ---------------------------------------------------------------------------------

  // Parses until a block tag named in `end_tags` (left as the current token, after its "{%"), or
  // the end of the source when end_tags is empty.
  Body parse_body(std::initializer_list<std::string_view> end_tags) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::kText: {
          auto s = make_stmt(StmtKind::kText, t.line);
          s->text = t.text;
          body.push_back(std::move(s));
          next();
          break;
        }
        case TokenType::kVarBegin: {
          auto s = make_stmt(StmtKind::kOutput, t.line);
          next();
          s->expr = parse_tuple(true);
          if (cur().type != TokenType::kVarEnd) fail(fmt::format("expected '}}}}', got {}", describe(cur())));
          next();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          next();
          if (cur().type != TokenType::kName) fail("expected a tag name after '{%'");
          for (std::string_view end : end_tags)
            if (cur().text == end) return body;
          body.push_back(parse_statement());
          break;
        }
        case TokenType::kEnd:
          if (end_tags.size() != 0) fail(fmt::format("unexpected end of template, expected '{}'", *end_tags.begin()));
          return body;
        default:
          fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  StmtPtr parse_statement() {
    const std::string tag = cur().text;
    const int line = cur().line;
    next();
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "call") return parse_call_block(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "with") return parse_with(line);
    if (tag == "generation") {
      auto s = make_stmt(StmtKind::kScope, line);
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      next();
      expect_block_end();
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(fmt::format("'{}' outside of a loop", tag));
      expect_block_end();
      return make_stmt(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" || tag == "block")
      fail(fmt::format("'{}' is not supported: a chat template cannot load other templates", tag));
    fail(fmt::format("unknown tag '{}'", tag));
  }

  StmtPtr parse_if(int line) {
    auto s = make_stmt(StmtKind::kIf, line);
    while (true) {
      ExprPtr cond = parse_tuple(false);
      expect_block_end();
      Body body = parse_body({"elif", "else", "endif"});
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string tag = cur().text;
      next();
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endif"});
        next();
      }
      expect_block_end();
      return s;
    }
  }

  // A for / set target: a name, or names separated by commas (optionally parenthesised).
  std::vector<std::string> parse_name_targets() {
    std::vector<std::string> names;
    const bool parens = skip_op("(");
    names.push_back(expect_name());
    while (skip_op(",")) {
      if (cur().type != TokenType::kName) break;
      names.push_back(expect_name());
    }
    if (parens) expect_op(")");
    return names;
  }

  StmtPtr parse_for(int line) {
    auto s = make_stmt(StmtKind::kFor, line);
    s->targets = parse_name_targets();
    if (!skip_name("in")) fail("expected 'in' in a for loop");
    s->expr = parse_tuple(false, /*allow_if_end=*/true);
    if (skip_name("if")) s->condition = parse_expression(true);
    if (is_name("recursive")) fail("recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    const bool outer_seen = loop_name_seen_;
    loop_name_seen_ = false;
    s->body = parse_body({"endfor", "else"});
    s->uses_loop_variable = loop_name_seen_;
    loop_name_seen_ = outer_seen || loop_name_seen_;
    --loop_depth_;
    if (cur().text == "else") {
      next();
      expect_block_end();
      s->else_body = parse_body({"endfor"});
    }
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_set(int line) {
    const std::string first = expect_name();
    if (skip_op(".")) {  // set ns.attr = value
      auto s = make_stmt(StmtKind::kSet, line);
      s->targets.push_back(first);
      s->attribute = expect_name();
      expect_op("=");
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    std::vector<std::string> targets{first};
    while (skip_op(",")) {
      if (cur().type != TokenType::kName) break;
      targets.push_back(expect_name());
    }
    if (skip_op("=")) {
      auto s = make_stmt(StmtKind::kSet, line);
      s->targets = std::move(targets);
      s->expr = parse_tuple(true);
      expect_block_end();
      return s;
    }
    if (targets.size() != 1) fail("a block set takes one name");
    auto s = make_stmt(StmtKind::kSetBlock, line);
    s->targets = std::move(targets);
    if (is_op("|")) s->filter = parse_filter_chain(nullptr);
    expect_block_end();
    s->body = parse_body({"endset"});
    next();
    expect_block_end();
    return s;
  }

  std::vector<ast::Parameter> parse_params() {
    std::vector<ast::Parameter> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      ast::Parameter p;
      p.name = expect_name();
      if (skip_op("=")) p.default_value = parse_expression(true);
      params.push_back(std::move(p));
    }
    next();
    return params;
  }

  StmtPtr parse_macro(int line) {
    auto s = make_stmt(StmtKind::kMacro, line);
    s->name = expect_name();
    s->params = parse_params();
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue never reach through a macro
    s->body = parse_body({"endmacro"});
    loop_depth_ = saved_loops;
    next();
    if (cur().type == TokenType::kName) next();  // {% endmacro name %}
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block(int line) {
    auto s = make_stmt(StmtKind::kCallBlock, line);
    if (is_op("(")) s->params = parse_params();
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected a call in a call block");
    expect_block_end();
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_body({"endcall"});
    loop_depth_ = saved_loops;
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block(int line) {
    auto s = make_stmt(StmtKind::kFilterBlock, line);
    s->filter = parse_filter_chain(nullptr, /*leading_bar=*/false);
    expect_block_end();
    s->body = parse_body({"endfilter"});
    next();
    expect_block_end();
    return s;
  }

  StmtPtr parse_with(int line) {
    auto s = make_stmt(StmtKind::kScope, line);
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      std::string name = expect_name();
      expect_op("=");
      s->assignments.emplace_back(std::move(name), parse_expression(true));
    }
    expect_block_end();
    s->body = parse_body({"endwith"});
    next();
    expect_block_end();
    return s;
  }

  // ---- expressions --------------------------------------------------------------------------------

  bool at_expression_end() const {
    const Token& t = cur();
    if (t.type == TokenType::kBlockEnd || t.type == TokenType::kVarEnd || t.type == TokenType::kEnd) return true;
    if (t.type == TokenType::kOperator && (t.text == ")" || t.text == "]" || t.text == "}" || t.text == "="))
      return true;
    return false;
  }

  // An expression, or a tuple when commas follow (for `{{ a, b }}`, `for x in a, b`, `set x = 1, 2`).
  ExprPtr parse_tuple(bool with_condexpr, bool allow_if_end = false) {
    const int line = cur().line;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tuple = make_expr(ExprKind::kTuple, line);
    tuple->operands.push_back(std::move(first));
    while (skip_op(",")) {
      if (at_expression_end() || (allow_if_end && is_name("if"))) break;
      tuple->operands.push_back(parse_expression(with_condexpr));
    }
    return fold_constant(std::move(tuple));
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const int line = cur().line;
      next();
      auto cond = make_expr(ExprKind::kCondition, line);
      cond->operands.push_back(std::move(expr));
      cond->operands.push_back(parse_or());
      cond->operands.push_back(skip_name("else") ? parse_expression(true) : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary_node(ExprKind kind, ExprPtr left, ExprPtr right, int line) {
    auto e = make_expr(kind, line);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      left = binary_node(ExprKind::kOr, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      left = binary_node(ExprKind::kAnd, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      auto e = make_expr(ExprKind::kNot, cur().line);
      next();
      e->target = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      CompareOp op;
      if (is_op("==")) op = CompareOp::kEq;
      else if (is_op("!=")) op = CompareOp::kNe;
      else if (is_op("<")) op = CompareOp::kLt;
      else if (is_op("<=")) op = CompareOp::kLe;
      else if (is_op(">")) op = CompareOp::kGt;
      else if (is_op(">=")) op = CompareOp::kGe;
      else if (is_name("in")) op = CompareOp::kIn;
      else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        next();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      next();
      if (!cmp) {
        cmp = make_expr(ExprKind::kCompare, line);
        cmp->operands.push_back(std::move(first));
      }
      cmp->compare_ops.push_back(op);
      cmp->operands.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr arithmetic(ast::BinaryOp op, ExprPtr left, ExprPtr right, int line) {
    auto e = binary_node(ExprKind::kBinary, std::move(left), std::move(right), line);
    e->binary_op = op;
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const auto op = is_op("+") ? ast::BinaryOp::kAdd : ast::BinaryOp::kSub;
      const int line = cur().line;
      next();
      left = arithmetic(op, std::move(left), parse_concat(), line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = make_expr(ExprKind::kConcat, line);
    e->operands.push_back(std::move(first));
    while (skip_op("~")) e->operands.push_back(parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (true) {
      ast::BinaryOp op;
      if (is_op("*")) op = ast::BinaryOp::kMul;
      else if (is_op("/")) op = ast::BinaryOp::kDiv;
      else if (is_op("//")) op = ast::BinaryOp::kFloorDiv;
      else if (is_op("%")) op = ast::BinaryOp::kMod;
      else break;
      const int line = cur().line;
      next();
      left = arithmetic(op, std::move(left), parse_pow(), line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      left = arithmetic(ast::BinaryOp::kPow, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make_expr(is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().line);
      next();
      node->target = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(Value v, int line) {
    auto e = make_expr(ExprKind::kLiteral, line);
    e->literal = std::move(v);
    return e;
  }

  // Lists, tuples and dicts of constants are built once, at parse time.
  ExprPtr fold_constant(ExprPtr e) {
    for (const auto& item : e->operands)
      if (item->kind != ExprKind::kLiteral) return e;
    if (e->kind == ExprKind::kDict) {
      auto dict = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e->operands.size(); i += 2) {
        if (!e->operands[i]->literal.is_string()) return e;  // the renderer reports the bad key
        dict->set(e->operands[i]->literal.as_string(), e->operands[i + 1]->literal);
      }
      return literal(Value::dict(std::move(dict)), e->line);
    }
    std::vector<Value> items;
    for (const auto& item : e->operands) items.push_back(item->literal);
    return literal(Value::list(std::move(items), e->kind == ExprKind::kTuple), e->line);
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        const std::string& n = t.text;
        ExprPtr e;
        if (n == "true" || n == "True") e = literal(Value::boolean(true), line);
        else if (n == "false" || n == "False") e = literal(Value::boolean(false), line);
        else if (n == "none" || n == "None") e = literal(Value::none(), line);
        else {
          e = make_expr(ExprKind::kName, line);
          e->name = n;
          if (n == "loop") loop_name_seen_ = true;
        }
        next();
        return e;
      }
      case TokenType::kString: {
        std::string s = t.text;
        next();
        while (cur().type == TokenType::kString) {  // adjacent literals concatenate
          s += cur().text;
          next();
        }
        return literal(Value::string(std::move(s)), line);
      }
      case TokenType::kInteger: {
        ExprPtr e = literal(Value::integer(t.integer), line);
        next();
        return e;
      }
      case TokenType::kFloat: {
        ExprPtr e = literal(Value::number(t.number), line);
        next();
        return e;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return literal(Value::list({}, true), line);
          ExprPtr first = parse_expression(true);
          if (skip_op(")")) return first;
          auto tuple = make_expr(ExprKind::kTuple, line);
          tuple->operands.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            tuple->operands.push_back(parse_expression(true));
          }
          expect_op(")");
          return fold_constant(std::move(tuple));
        }
        if (t.text == "[") {
          next();
          auto list = make_expr(ExprKind::kList, line);
          while (!is_op("]")) {
            if (!list->operands.empty()) expect_op(",");
            if (is_op("]")) break;
            list->operands.push_back(parse_expression(true));
          }
          next();
          return fold_constant(std::move(list));
        }
        if (t.text == "{") {
          next();
          auto dict = make_expr(ExprKind::kDict, line);
          while (!is_op("}")) {
            if (!dict->operands.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->operands.push_back(parse_expression(true));
            expect_op(":");
            dict->operands.push_back(parse_expression(true));
          }
          next();
          return fold_constant(std::move(dict));
        }
        break;
      default:
        break;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        next();
        if (cur().type == TokenType::kName) {
          auto e = make_expr(ExprKind::kGetAttr, line);
          e->name = cur().text;
          e->target = std::move(node);
          node = std::move(e);
          next();
        } else if (cur().type == TokenType::kInteger) {
          auto e = make_expr(ExprKind::kGetItem, line);
          e->operands.push_back(literal(Value::integer(cur().integer), line));
          e->target = std::move(node);
          node = std::move(e);
          next();
        } else {
          fail("expected a name or number after '.'");
        }
      } else if (is_op("[")) {
        next();
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (is_op(":")) {
        is_slice = true;
        if (++part > 2) fail("too many ':' in a slice");
        next();
        continue;
      }
      if (parts[part]) fail("expected ']' or ':'");
      parts[part] = parse_expression(true);
      if (!is_slice && is_op(",")) fail("tuple subscripts are not supported");
    }
    next();
    if (!is_slice) {
      if (!parts[0]) fail("empty subscript");
      auto e = make_expr(ExprKind::kGetItem, line);
      e->target = std::move(target);
      e->operands.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make_expr(ExprKind::kSlice, line);
    e->target = std::move(target);
    for (auto& p : parts) e->operands.push_back(std::move(p));
    return e;
  }

  // "(" args ")" into e->operands / e->keywords.
  void parse_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.operands.empty() || !e.keywords.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        ast::Keyword kw;
        kw.name = cur().text;
        next();
        next();
        kw.value = parse_expression(true);
        e.keywords.push_back(std::move(kw));
      } else {
        if (!e.keywords.empty()) fail("a positional argument follows a keyword argument");
        e.operands.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make_expr(ExprKind::kCall, cur().line);
    e->target = std::move(callee);
    parse_args(*e);
    return e;
  }

  // One or more "| name(args)" applied to `input` (null inside filter and set blocks).
  ExprPtr parse_filter_chain(ExprPtr input, bool leading_bar = true) {
    ExprPtr node = std::move(input);
    bool first = true;
    while (first ? (!leading_bar || is_op("|")) : is_op("|")) {
      if (!first || leading_bar) expect_op("|");
      first = false;
      auto e = make_expr(ExprKind::kFilter, cur().line);
      e->name = expect_name();
      if (is_op("(")) parse_args(*e);
      e->target = std::move(node);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr subject) {
    auto e = make_expr(ExprKind::kTest, cur().line);
    next();  // is
    if (skip_name("not")) e->negated = true;
    e->name = expect_name();
    e->target = std::move(subject);
    const Token& t = cur();
    if (is_op("(")) {
      parse_args(*e);
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
                t.type == TokenType::kFloat || is_op("[") || is_op("{")) &&
               !(is_name("else") || is_name("or") || is_name("and"))) {
      if (is_name("is")) fail("tests cannot be chained with 'is'");
      e->operands.push_back(parse_postfix(parse_primary()));
    }
    return e;
  }

  std::vector<Token> tokens_;
  const ParseLimits& limits_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool loop_name_seen_ = false;  // the name `loop` appeared since the innermost for began
};

}  // namespace

ast::Program parse_template(std::string_view source, const ParseLimits& limits) {
  return Parser(tokenize(source, limits), limits).run();
}

}  // namespace pagedkv::jinja
