// The compiled form of selectors (lib/selector/program.h) and its persisted encoding
// (Selector::Encode / Decode): evaluation against a reference written from the typing rules of
// docs/selectors.md, round trips of random selectors, and damaged bytes.

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gryph/broker/matcher.h"
#include "gryph/event.h"
#include "gryph/selector.h"
#include "gryph/subscription.h"
#include "lib/selector/like_pattern.h"
#include "lib/selector/numeric.h"
#include "lib/selector/program.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

namespace sp = selector_program;
using testing::Rng;
using testing::Seeds;

// ---------------------------------------------------------------------------------------------
// A reference evaluator: each generated expression carries its text and a function computing
// its value by the rules of docs/selectors.md, written independently of the program.

struct Null {
  bool operator==(const Null&) const = default;
};
struct TypeError {
  bool operator==(const TypeError&) const = default;
};
using Ref = std::variant<Null, TypeError, int64_t, double, std::string, bool>;

bool IsNumber(const Ref& v) {
  return std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v);
}
bool IsNaN(const Ref& v) {
  const double* d = std::get_if<double>(&v);
  return d != nullptr && std::isnan(*d);
}
// -1, 0, 1 by exact value. REQUIRES: both numbers, no NaN.
int Order(const Ref& a, const Ref& b) {
  using selector_ast::CompareInt64Double;
  const int64_t* ai = std::get_if<int64_t>(&a);
  const int64_t* bi = std::get_if<int64_t>(&b);
  if (ai && bi) return *ai < *bi ? -1 : (*ai > *bi ? 1 : 0);
  if (ai) return CompareInt64Double(*ai, std::get<double>(b));
  if (bi) return -CompareInt64Double(*bi, std::get<double>(a));
  const double x = std::get<double>(a), y = std::get<double>(b);
  return x < y ? -1 : (x > y ? 1 : 0);
}

Ref FromTruth(Truth t) {
  if (t == Truth::kUnknown) return Null{};
  return t == Truth::kTrue;
}
Truth ToTruth(const Ref& v) {
  const bool* b = std::get_if<bool>(&v);
  if (b == nullptr) return Truth::kUnknown;
  return *b ? Truth::kTrue : Truth::kFalse;
}
Truth B(bool b) { return b ? Truth::kTrue : Truth::kFalse; }

Truth RefCompare(const std::string& op, const Ref& a, const Ref& b) {
  if (std::holds_alternative<Null>(a) || std::holds_alternative<Null>(b)) return Truth::kUnknown;
  if (IsNumber(a) && IsNumber(b)) {
    if (IsNaN(a) || IsNaN(b)) return Truth::kUnknown;
    const int c = Order(a, b);
    if (op == "=") return B(c == 0);
    if (op == "<>") return B(c != 0);
    if (op == "<") return B(c < 0);
    if (op == "<=") return B(c <= 0);
    if (op == ">") return B(c > 0);
    return B(c >= 0);
  }
  if ((op != "=" && op != "<>") || a.index() != b.index()) return Truth::kFalse;
  if (!std::holds_alternative<std::string>(a) && !std::holds_alternative<bool>(a)) {
    return Truth::kFalse;
  }
  return B((a == b) == (op == "="));
}

Ref RefArithmetic(char op, const Ref& a, const Ref& b) {
  if (std::holds_alternative<Null>(a) || std::holds_alternative<Null>(b)) return Null{};
  if (!IsNumber(a) || !IsNumber(b)) return TypeError{};
  const int64_t* ai = std::get_if<int64_t>(&a);
  const int64_t* bi = std::get_if<int64_t>(&b);
  if (ai && bi) {
    int64_t r;
    bool overflow;
    switch (op) {
      case '+': overflow = __builtin_add_overflow(*ai, *bi, &r); break;
      case '-': overflow = __builtin_sub_overflow(*ai, *bi, &r); break;
      case '*': overflow = __builtin_mul_overflow(*ai, *bi, &r); break;
      default:
        if (*bi == 0) return Null{};
        overflow = *ai == INT64_MIN && *bi == -1;
        r = overflow ? 0 : *ai / *bi;
    }
    if (!overflow) return r;
  }
  auto d = [](const Ref& v) {
    const int64_t* i = std::get_if<int64_t>(&v);
    return i ? static_cast<double>(*i) : std::get<double>(v);
  };
  const double x = d(a), y = d(b);
  switch (op) {
    case '+': return x + y;
    case '-': return x - y;
    case '*': return x * y;
    default:
      if (y == 0) return Null{};
      return x / y;
  }
}

using Fn = std::function<Ref(const Event&)>;
struct Expr {
  std::string text;
  Fn eval;
  enum Type { kAny, kNumeric, kString, kBoolean } type;
};

Ref FromEvent(const Event& e, const std::string& name) {
  const AttributeValue* v = e.Find(name);
  if (v == nullptr) return Null{};
  return std::visit([](const auto& x) -> Ref { return x; }, *v);
}

const char* const kNames[] = {"a", "b", "c", "s", "x"};

class Generator {
 public:
  explicit Generator(Rng& rng) : rng_(rng) {}

  Expr Attr() {
    std::string name = kNames[rng_.Uniform(std::size(kNames))];
    return {name, [name](const Event& e) { return FromEvent(e, name); }, Expr::kAny};
  }

  Expr Number() {
    switch (rng_.Uniform(5)) {
      case 0: {
        const int64_t v = static_cast<int64_t>(rng_.Uniform(7)) - 3;
        return {absl::StrCat("(", v, ")"), [v](const Event&) -> Ref { return v; }, Expr::kNumeric};
      }
      case 1: {
        const int64_t v = int64_t{1} << 53 | 1;  // beyond a double, and beyond 32 bits
        return {absl::StrCat(v), [v](const Event&) -> Ref { return v; }, Expr::kNumeric};
      }
      case 2: {
        const double v = static_cast<double>(rng_.Uniform(9)) / 4 - 1;
        return {absl::StrCat("(", v, "e0)"), [v](const Event&) -> Ref { return v; },
                Expr::kNumeric};
      }
      case 3: {
        const int64_t v = INT64_MAX;
        return {absl::StrCat(v), [v](const Event&) -> Ref { return v; }, Expr::kNumeric};
      }
      default: {
        const int64_t v = static_cast<int64_t>(rng_.Uniform(3000000000));
        return {absl::StrCat(v), [v](const Event&) -> Ref { return v; }, Expr::kNumeric};
      }
    }
  }

  // A numeric expression or an attribute.
  Expr Value(int depth) {
    const uint64_t pick = rng_.Uniform(depth > 2 ? 2 : 5);
    if (pick == 0) return Attr();
    if (pick == 1) return Number();
    if (pick == 2) {
      Expr a = Value(depth + 1);
      const bool plus = rng_.OneIn(3);
      Fn f = a.eval;
      if (plus) {
        return {"(+" + a.text + ")",
                [f](const Event& e) -> Ref {
                  Ref v = f(e);
                  if (std::holds_alternative<Null>(v) || IsNumber(v)) return v;
                  return TypeError{};
                },
                Expr::kNumeric};
      }
      return {"(-" + a.text + ")",
              [f](const Event& e) -> Ref {
                const Ref v = f(e);
                if (const int64_t* i = std::get_if<int64_t>(&v)) {
                  if (*i == INT64_MIN) return -static_cast<double>(*i);
                  return -*i;
                }
                if (const double* d = std::get_if<double>(&v)) return -*d;
                if (std::holds_alternative<Null>(v)) return v;
                return TypeError{};
              },
              Expr::kNumeric};
    }
    Expr a = Value(depth + 1);
    Expr b = Value(depth + 1);
    const char op = "+-*/"[rng_.Uniform(4)];
    Fn fa = a.eval, fb = b.eval;
    return {absl::StrCat("(", a.text, " ", std::string(1, op), " ", b.text, ")"),
            [fa, fb, op](const Event& e) { return RefArithmetic(op, fa(e), fb(e)); },
            Expr::kNumeric};
  }

  Expr Condition(int depth) {
    switch (rng_.Uniform(depth > 3 ? 7 : 11)) {
      case 0: return Attr();  // a boolean attribute as a condition
      case 1: {
        static const char* const kOps[] = {"=", "<>", "<", "<=", ">", ">="};
        const std::string op = kOps[rng_.Uniform(6)];
        Expr a = Value(depth + 1), b = Value(depth + 1);
        Fn fa = a.eval, fb = b.eval;
        return {absl::StrCat("(", a.text, " ", op, " ", b.text, ")"),
                [fa, fb, op](const Event& e) { return FromTruth(RefCompare(op, fa(e), fb(e))); },
                Expr::kBoolean};
      }
      case 2: {  // equality with strings and booleans, conditions as values
        Expr a = rng_.OneIn(2) ? Attr() : Condition(depth + 2);
        Expr b;
        switch (rng_.Uniform(3)) {
          case 0:
            b = {"'u'", [](const Event&) -> Ref { return std::string("u"); }, Expr::kString};
            break;
          case 1: b = {"TRUE", [](const Event&) -> Ref { return true; }, Expr::kBoolean}; break;
          default: b = Attr();
        }
        const std::string op = rng_.OneIn(2) ? "=" : "<>";
        Fn fa = a.eval, fb = b.eval;
        return {absl::StrCat("(", a.text, " ", op, " ", b.text, ")"),
                [fa, fb, op](const Event& e) { return FromTruth(RefCompare(op, fa(e), fb(e))); },
                Expr::kBoolean};
      }
      case 3: {
        Expr v = Value(depth + 1), lo = Value(depth + 1), hi = Value(depth + 1);
        const bool neg = rng_.OneIn(3);
        Fn fv = v.eval, fl = lo.eval, fh = hi.eval;
        return {absl::StrCat("(", v.text, neg ? " NOT" : "", " BETWEEN ", lo.text, " AND ", hi.text,
                             ")"),
                [=](const Event& e) {
                  const Ref x = fv(e), l = fl(e), h = fh(e);
                  if (neg) {
                    return FromTruth(
                        selector_program::Or(RefCompare("<", x, l), RefCompare(">", x, h)));
                  }
                  return FromTruth(
                      selector_program::And(RefCompare(">=", x, l), RefCompare("<=", x, h)));
                },
                Expr::kBoolean};
      }
      case 4: return In();
      case 5: {
        static const char* const kPatterns[] = {"%", "u%", "_", "%v", "u\\_%", "%u%v"};
        const std::string pattern = kPatterns[rng_.Uniform(std::size(kPatterns))];
        const bool neg = rng_.OneIn(3);
        const std::string name = kNames[rng_.Uniform(std::size(kNames))];
        const bool escaped = absl::StrContains(pattern, '\\');
        auto compiled = std::make_shared<selector_ast::LikePattern>(
            *selector_ast::LikePattern::Compile(pattern, escaped ? "\\" : ""));
        return {absl::StrCat("(", name, neg ? " NOT" : "", " LIKE '", pattern, "'",
                             escaped ? " ESCAPE '\\'" : "", ")"),
                [=](const Event& e) -> Ref {
                  const AttributeValue* v = e.Find(name);
                  if (v == nullptr) return Null{};
                  const std::string* s = std::get_if<std::string>(v);
                  if (s == nullptr) return false;
                  return compiled->Matches(*s) != neg;
                },
                Expr::kBoolean};
      }
      case 6: {
        const std::string name = kNames[rng_.Uniform(std::size(kNames))];
        const bool neg = rng_.OneIn(2);
        return {absl::StrCat("(", name, neg ? " IS NOT NULL" : " IS NULL", ")"),
                [=](const Event& e) -> Ref { return (e.Find(name) == nullptr) != neg; },
                Expr::kBoolean};
      }
      case 7: {
        Expr a = Condition(depth + 1);
        Fn f = a.eval;
        return {"(NOT " + a.text + ")",
                [f](const Event& e) { return FromTruth(selector_program::Not(ToTruth(f(e)))); },
                Expr::kBoolean};
      }
      default: {
        const bool is_or = rng_.OneIn(2);
        std::vector<std::string> texts;
        std::vector<Fn> fns;
        for (uint64_t n = 2 + rng_.Uniform(4); n > 0; --n) {
          Expr c = Condition(depth + 1);
          texts.push_back(c.text);
          fns.push_back(c.eval);
        }
        return {absl::StrCat("(", absl::StrJoin(texts, is_or ? " OR " : " AND "), ")"),
                [fns, is_or](const Event& e) {
                  Truth t = is_or ? Truth::kFalse : Truth::kTrue;
                  for (const Fn& f : fns) {
                    t = is_or ? selector_program::Or(t, ToTruth(f(e)))
                              : selector_program::And(t, ToTruth(f(e)));
                  }
                  return FromTruth(t);
                },
                Expr::kBoolean};
      }
    }
  }

  // IN lists, short and long (past kSortedInThreshold: binary search).
  Expr In() {
    const std::string name = kNames[rng_.Uniform(std::size(kNames))];
    const bool neg = rng_.OneIn(3);
    const bool numeric = rng_.OneIn(2);
    const uint64_t n = 1 + rng_.Uniform(rng_.OneIn(2) ? 4 : 40);
    std::vector<AttributeValue> values;
    std::vector<std::string> texts;
    for (uint64_t i = 0; i < n; ++i) {
      if (numeric) {
        if (rng_.OneIn(3)) {
          const double d = static_cast<double>(rng_.Uniform(40)) / 2 - 5;
          values.emplace_back(d);
          texts.push_back(absl::StrCat(d, "e0"));
        } else {
          const int64_t v = static_cast<int64_t>(rng_.Uniform(30)) - 5;
          values.emplace_back(v);
          texts.push_back(absl::StrCat(v));
        }
      } else {
        const std::string s(1 + rng_.Uniform(2), static_cast<char>('t' + rng_.Uniform(4)));
        values.emplace_back(s);
        texts.push_back("'" + s + "'");
      }
    }
    return {absl::StrCat("(", name, neg ? " NOT" : "", " IN (", absl::StrJoin(texts, ", "), "))"),
            [=](const Event& e) -> Ref {
              const AttributeValue* v = e.Find(name);
              if (v == nullptr) return Null{};
              const Ref x = FromEvent(e, name);
              if (std::holds_alternative<bool>(x)) return false;
              if (numeric != IsNumber(x)) return false;
              if (IsNaN(x)) return Null{};
              bool found = false;
              for (const AttributeValue& lit : values) {
                const Ref l = std::visit([](const auto& y) -> Ref { return y; }, lit);
                found = found || (numeric ? Order(x, l) == 0 : x == l);
              }
              return found != neg;
            },
            Expr::kBoolean};
  }

 private:
  Rng& rng_;
};

Event RandomEvent(Rng& rng) {
  Event e;
  for (const char* name : kNames) {
    switch (rng.Uniform(9)) {
      case 0: break;  // absent
      case 1: e.SetInt64(name, static_cast<int64_t>(rng.Uniform(30)) - 5); break;
      case 2: e.SetDouble(name, static_cast<double>(rng.Uniform(40)) / 2 - 5); break;
      case 3: e.SetDouble(name, std::numeric_limits<double>::quiet_NaN()); break;
      case 4: e.SetInt64(name, rng.OneIn(2) ? (int64_t{1} << 53) : INT64_MAX); break;
      case 5: e.SetBool(name, rng.OneIn(2)); break;
      case 6: e.SetString(name, std::string(1 + rng.Uniform(2), 't' + rng.Uniform(4))); break;
      case 7: e.SetString(name, rng.OneIn(2) ? "u_vv" : "uv"); break;
      default: e.SetDouble(name, 0.0); break;
    }
  }
  return e;
}

Selector MustParse(absl::string_view text) {
  absl::StatusOr<Selector> s = Selector::Parse(text);
  INFO(text);
  REQUIRE_OK(s);
  return *std::move(s);
}

// ---------------------------------------------------------------------------------------------

TEST_CASE("the program evaluates random selectors as the reference does", "[selector]") {
  int compared = 0;
  for (uint64_t seed : Seeds(9100, 10)) {
    INFO("seed " << seed);
    Rng rng(seed);
    Generator gen(rng);
    for (int iter = 0; iter < 300; ++iter) {
      const Expr c = gen.Condition(0);
      INFO("selector: " << c.text);
      const Selector s = MustParse(c.text);
      const absl::StatusOr<Selector> decoded = Selector::Decode(s.Encode());
      REQUIRE_OK(decoded);
      const sp::View view(*s.program());
      const sp::ViewNodes conjuncts = view.Conjuncts(view.root());
      for (int k = 0; k < 20; ++k) {
        const Event e = RandomEvent(rng);
        const Truth want = ToTruth(c.eval(e));
        REQUIRE(s.Evaluate(e) == want);
        REQUIRE(decoded->Evaluate(e) == want);
        // The conjuncts, each evaluated over its own code, make up the whole.
        Truth all = Truth::kTrue;
        for (const sp::ViewNode* n : conjuncts) {
          all = sp::And(all, s.program()->EvaluateRange(n->begin, n->end, e));
        }
        REQUIRE(all == want);
        ++compared;
      }
    }
  }
  REQUIRE(compared == 10 * 300 * 20);
}

TEST_CASE("encoded selectors decode to the same text, rendering and bytes", "[selector]") {
  for (uint64_t seed : Seeds(9200, 10)) {
    INFO("seed " << seed);
    Rng rng(seed);
    Generator gen(rng);
    for (int iter = 0; iter < 300; ++iter) {
      const std::string text = "  " + gen.Condition(0).text + "\n";
      INFO("selector: " << text);
      const Selector s = MustParse(text);
      const std::string bytes = s.Encode();
      REQUIRE(static_cast<uint8_t>(bytes[0]) == Selector::kEncodingVersion);
      absl::StatusOr<Selector> d = Selector::Decode(bytes);
      REQUIRE_OK(d);
      REQUIRE(d->text() == text);
      REQUIRE(d->DebugString() == s.DebugString());
      REQUIRE(d->Encode() == bytes);
      REQUIRE(d->program()->code() == s.program()->code());
    }
  }
  for (absl::string_view blank : {"", " ", "\t\n"}) {
    absl::StatusOr<Selector> d = Selector::Decode(MustParse(blank).Encode());
    REQUIRE_OK(d);
    REQUIRE(d->matches_everything());
    REQUIRE(d->text() == blank);
  }
  absl::StatusOr<Selector> d = Selector::Decode(Selector().Encode());
  REQUIRE_OK(d);
  REQUIRE(d->matches_everything());
}

TEST_CASE("a program stored beside its text decodes to the same selector", "[selector]") {
  for (uint64_t seed : Seeds(9250, 10)) {
    INFO("seed " << seed);
    Rng rng(seed);
    Generator gen(rng);
    for (int iter = 0; iter < 300; ++iter) {
      const std::string text = gen.Condition(0).text;
      INFO("selector: " << text);
      const Selector s = MustParse(text);
      const std::string bytes = s.EncodeProgram();
      REQUIRE(static_cast<uint8_t>(bytes[0]) == Selector::kEncodingVersion);
      absl::StatusOr<Selector> d = Selector::DecodeProgram(text, bytes);
      REQUIRE_OK(d);
      REQUIRE(d->text() == text);
      REQUIRE(d->Encode() == s.Encode());
    }
  }
  for (absl::string_view blank : {"", " ", "\t\n"}) {
    absl::StatusOr<Selector> d = Selector::DecodeProgram(blank, MustParse(blank).EncodeProgram());
    REQUIRE_OK(d);
    REQUIRE(d->matches_everything());
    REQUIRE(d->text() == blank);
  }
  // A program needs a text that is not blank, and the reverse.
  REQUIRE(Selector::DecodeProgram("a = 1", Selector().EncodeProgram()).status().code() ==
          absl::StatusCode::kDataLoss);
  REQUIRE(Selector::DecodeProgram(" ", MustParse("a = 1").EncodeProgram()).status().code() ==
          absl::StatusCode::kDataLoss);
  // Damage in the program is refused as Decode refuses it; an unknown version is named.
  const std::string text = "a BETWEEN 1 AND 2 AND s LIKE 'x%' AND b IN (1, 2.5) OR NOT c";
  const std::string bytes = MustParse(text).EncodeProgram();
  REQUIRE(Selector::DecodeProgram(text, "").status().code() == absl::StatusCode::kDataLoss);
  for (size_t n = 1; n < bytes.size(); ++n) {
    REQUIRE(Selector::DecodeProgram(text, bytes.substr(0, n)).status().code() ==
            absl::StatusCode::kDataLoss);
  }
  for (size_t i = 1; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      INFO("byte " << i << " bit " << bit);
      REQUIRE(Selector::DecodeProgram(text, bad).status().code() == absl::StatusCode::kDataLoss);
    }
  }
  // The program of another text, even one that compiles to the same program, is refused.
  REQUIRE(Selector::DecodeProgram(text + " ", bytes).status().code() ==
          absl::StatusCode::kDataLoss);
  REQUIRE(Selector::DecodeProgram("a = 1", MustParse("a = 2").EncodeProgram()).status().code() ==
          absl::StatusCode::kDataLoss);
  std::string version = bytes;
  version[0] = 2;
  const absl::Status st = Selector::DecodeProgram(text, version).status();
  REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(st.message(), "version 2"));
}

TEST_CASE("damaged or truncated selector encodings are refused as data loss", "[selector]") {
  const Selector s = MustParse("a BETWEEN 1 AND 2 AND s LIKE 'x%' AND b IN (1, 2.5) OR NOT c");
  const std::string bytes = s.Encode();
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      const absl::Status st = Selector::Decode(bad).status();
      INFO("byte " << i << " bit " << bit << ": " << st);
      REQUIRE((st.code() == absl::StatusCode::kDataLoss ||
               (i == 0 && st.code() == absl::StatusCode::kInvalidArgument)));
    }
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    REQUIRE(Selector::Decode(bytes.substr(0, n)).status().code() == absl::StatusCode::kDataLoss);
  }
  REQUIRE(Selector::Decode(bytes + "x").status().code() == absl::StatusCode::kDataLoss);
  std::string version = bytes;
  version[0] = 2;
  const absl::Status st = Selector::Decode(version).status();
  REQUIRE(st.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(st.message(), "version 2"));
}

TEST_CASE("damaged programs are refused or evaluate without fault", "[selector]") {
  // Past the checksum: every program the checker accepts must be safe to run and render, keep
  // its bytes, and evaluate as its rendering parsed again does.
  std::vector<Event> events;
  Rng rng(9300);
  for (int i = 0; i < 8; ++i) events.push_back(RandomEvent(rng));
  int accepted = 0, refused = 0;
  for (uint64_t seed : Seeds(9400, 5)) {
    INFO("seed " << seed);
    Rng r(seed);
    Generator gen(r);
    for (int iter = 0; iter < 40; ++iter) {
      const Selector s = MustParse(gen.Condition(0).text);
      const std::string code(s.program()->code());
      for (size_t i = 0; i < code.size(); ++i) {
        for (int flip : {0x01, 0x80, 0xFF, 0x10}) {
          std::string bad = code;
          bad[i] = static_cast<char>(bad[i] ^ flip);
          absl::StatusOr<sp::ProgramRef> p = sp::Program::Make(bad);
          if (!p.ok()) {
            REQUIRE(p.status().code() == absl::StatusCode::kDataLoss);
            REQUIRE(absl::StartsWith(p.status().message(), "selector program: "));
            ++refused;
            continue;
          }
          ++accepted;
          REQUIRE((*p)->code() == bad);
          // An accepted program means what its rendering says.
          const sp::View view(**p);
          const std::string rendered = view.ToString(*view.root());
          INFO("accepted: " << rendered);
          SelectorOptions unlimited;
          unlimited.max_length = SIZE_MAX;
          absl::StatusOr<Selector> again = Selector::Parse(rendered, unlimited);
          if (!again.ok()) {
            REQUIRE(absl::StrContains(again.status().message(), "nested too deeply"));
          }
          for (const Event& e : events) {
            const Truth t = (*p)->Evaluate(e);
            if (again.ok()) REQUIRE(again->Evaluate(e) == t);
          }
        }
      }
      for (size_t n = 0; n < code.size(); ++n) {
        absl::StatusOr<sp::ProgramRef> p = sp::Program::Make(code.substr(0, n));
        if (p.ok()) {
          for (const Event& e : events) (void)(*p)->Evaluate(e);
        }
      }
    }
  }
  REQUIRE(refused > 0);
  REQUIRE(accepted > 0);  // flips of literal bytes give other valid programs
}

// Builds raw programs for the checker.
std::string Code(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST_CASE("the program checker names what is wrong", "[selector]") {
  using O = sp::Op;
  auto op = [](O o) { return static_cast<int>(o); };
  auto refused = [](const std::string& code, absl::string_view what) {
    absl::StatusOr<sp::ProgramRef> p = sp::Program::Make(code);
    INFO(p.status());
    REQUIRE(p.status().code() == absl::StatusCode::kDataLoss);
    REQUIRE(absl::StrContains(p.status().message(), what));
  };
  // `a`, the smallest program.
  REQUIRE_OK(sp::Program::Make(Code({op(O::kAttr), 1, 'a'})));
  refused("", "not one expression");
  refused(Code({0}), "unknown operation 0");
  refused(Code({99}), "unknown operation 99");
  refused(Code({op(O::kAttr), 5, 'a'}), "bad attribute name");
  refused(Code({op(O::kAttr), 3, 'A', 'N', 'D'}), "bad attribute name");  // a keyword
  refused(Code({op(O::kAttr), 1, '1'}), "bad attribute name");
  refused(Code({op(O::kNot)}), "missing operand");
  refused(Code({op(O::kAttr), 1, 'a', op(O::kAttr), 1, 'b'}), "not one expression");
  refused(Code({op(O::kInt32), 1, 0, 0}), "truncated literal");
  refused(Code({op(O::kInt32), 1, 0, 0, 0}), "not a condition");
  // 'x' < a: ordering a string.
  refused(Code({op(O::kString), 1, 'x', op(O::kAttr), 1, 'a', op(O::kLess)}), "mistyped");
  // NOT 5.
  refused(Code({op(O::kInt32), 5, 0, 0, 0, op(O::kNot)}), "mistyped");
  // a + TRUE.
  refused(Code({op(O::kAttr), 1, 'a', op(O::kTrue), op(O::kAdd)}), "mistyped");
  // A NaN literal.
  refused(Code({op(O::kAttr), 1, 'a', op(O::kDouble), 0, 0, 0, 0, 0, 0, 0xF8, 0x7F, op(O::kEqual)}),
          "non-finite");
  // a AND b with a jump that misses the end, and without its end.
  refused(
      Code({op(O::kAttr), 1, 'a', op(O::kAndFirst), 4, op(O::kAttr), 1, 'b', op(O::kAndLast), 2}),
      "bad AND/OR end");
  refused(Code({op(O::kAttr), 1, 'a', op(O::kAndFirst), 3, op(O::kAttr), 1, 'b'}),
          "unterminated AND/OR");
  refused(
      Code({op(O::kAttr), 1, 'a', op(O::kAndFirst), 5, op(O::kAttr), 1, 'b', op(O::kOrLast), 2}),
      "unmatched AND/OR");
  REQUIRE_OK(sp::Program::Make(
      Code({op(O::kAttr), 1, 'a', op(O::kAndFirst), 5, op(O::kAttr), 1, 'b', op(O::kAndLast), 2})));
  // An empty IN list, a mixed one, and a LIKE that does not compile.
  refused(Code({op(O::kIn), 1, 'a', 0, 0}), "bad IN list length");
  refused(Code({op(O::kIn), 1, 'a', 2, 1, 'x'}), "bad IN list type");
  refused(Code({op(O::kLike), 1, 'a', 0, 0, 2, '\\', 'x', 1, '\\'}), "bad LIKE pattern");
  refused(Code({op(O::kLike), 1, 'a', 1, 0, 1, 'x', 0}), "bad LIKE index");
  // Too deep: 300 NOTs.
  std::string deep = Code({op(O::kAttr), 1, 'a'});
  deep.append(300, static_cast<char>(op(O::kNot)));
  refused(deep, "too deep");
}

TEST_CASE("long IN lists are found by binary search, short ones by scanning", "[selector]") {
  std::string longer = "a IN (";
  for (int i = 40; i > 0; --i)
    absl::StrAppend(&longer, i == 40 ? "" : ", ", i * 3, ", ", i, ".5e0");
  longer += ")";
  const Selector s = MustParse(longer);
  Event e;
  for (int v = -2; v < 130; ++v) {
    e.SetInt64("a", v);
    INFO(v);
    REQUIRE(s.Matches(e) == (v % 3 == 0 && v >= 3 && v <= 120));
    e.SetDouble("a", v + 0.5);
    REQUIRE(s.Matches(e) == (v >= 1 && v <= 40));
    e.SetDouble("a", v);
    REQUIRE(s.Matches(e) == (v % 3 == 0 && v >= 3 && v <= 120));
  }
  e.SetDouble("a", std::numeric_limits<double>::quiet_NaN());
  REQUIRE(s.Evaluate(e) == Truth::kUnknown);
  e.SetString("a", "3");
  REQUIRE(s.Evaluate(e) == Truth::kFalse);
  std::string strings = "a NOT IN (";
  for (int i = 0; i < 30; ++i) absl::StrAppend(&strings, i ? ", " : "", "'v", 29 - i, "'");
  strings += ")";
  const Selector t = MustParse(strings);
  for (int i = 0; i < 40; ++i) {
    e.SetString("a", absl::StrCat("v", i));
    REQUIRE(t.Matches(e) == (i >= 30));
  }
}

TEST_CASE("a subscription is made of a decoded selector without parsing", "[subscription]") {
  const Selector s = MustParse("price > 100 AND symbol IN ('IBM', 'MSFT')");
  absl::StatusOr<Selector> decoded = Selector::Decode(s.Encode());
  REQUIRE_OK(decoded);
  absl::StatusOr<Subscription> sub = Subscription::Create(*decoded, "orders/#");
  REQUIRE_OK(sub);
  REQUIRE(sub->selector().program() == decoded->program());  // shared, not compiled again
  absl::StatusOr<Subscription> by_text =
      Subscription::Create("price > 100 AND symbol IN ('IBM', 'MSFT')", "orders/#");
  REQUIRE_OK(by_text);
  REQUIRE(*sub == *by_text);
  Event e;
  e.SetTopic("orders/us").SetInt64("price", 150).SetString("symbol", "IBM");
  REQUIRE(sub->Matches(e));
  e.SetTopic("quotes/us");
  REQUIRE_FALSE(sub->Matches(e));
  REQUIRE_CODE(Subscription::Create(*decoded, "a/#/b"), absl::StatusCode::kInvalidArgument);

  Matcher m;
  REQUIRE_OK(m.Add(SubscriberId{1}, *std::move(sub)));
  m.Publish();
  std::vector<SubscriberId> ids;
  e.SetTopic("orders/eu");
  m.Match(e, &ids);
  REQUIRE(ids.size() == 1);
}

}  // namespace
}  // namespace gryph
