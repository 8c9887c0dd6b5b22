#include "gryph/selector.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "lib/selector/like_pattern.h"
#include "lib/selector/numeric.h"
#include "lib/selector/program.h"
#include "lib/selector/utf8.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

using selector_ast::CompareInt64Double;
using selector_ast::IsUtf8CharStart;
using selector_ast::LikePattern;
using selector_ast::PreviousUtf8CharStart;
using selector_ast::Utf8CharLength;
using selector_program::IndexableConjunct;
using selector_program::ViewNode;
using testing::Rng;
using testing::Seeds;

Selector MustParse(absl::string_view text) {
  auto s = Selector::Parse(text);
  INFO("selector: " << text);
  REQUIRE_OK(s);
  return *std::move(s);
}

std::string ParseError(absl::string_view text) {
  auto s = Selector::Parse(text);
  INFO("selector: " << text);
  REQUIRE_CODE(s, absl::StatusCode::kInvalidArgument);
  return std::string(s.status().message());
}

// A selector's program seen as a tree, and the conjuncts of its root (none when it matches
// everything).
struct Viewed {
  explicit Viewed(const Selector& s) {
    if (s.program() != nullptr) view.Reset(*s.program());
    conjuncts = view.Conjuncts(view.root());
  }
  selector_program::View view;
  selector_program::ViewNodes conjuncts;
};

Truth Negation(Truth t) {
  return t == Truth::kTrue ? Truth::kFalse : t == Truth::kFalse ? Truth::kTrue : Truth::kUnknown;
}

// ---------------------------------------------------------------------------------------------
// The API.

TEST_CASE("a default-constructed selector matches every event", "[selector]") {
  Selector s;
  REQUIRE(s.matches_everything());
  REQUIRE(s.text().empty());
  REQUIRE(s.Evaluate(Event()) == Truth::kTrue);
  REQUIRE(s.DebugString().empty());
  REQUIRE(s.program() == nullptr);
}

TEST_CASE("an empty or blank selector matches every event and keeps its text", "[selector]") {
  for (absl::string_view text : {"", " ", "\t\r\n\f "}) {
    Selector s = MustParse(text);
    REQUIRE(s.matches_everything());
    REQUIRE(s.text() == text);
    REQUIRE(s.Matches(Event()));
  }
}

TEST_CASE("a selector keeps its text unchanged", "[selector]") {
  Selector s = MustParse("  price > 100 and Symbol = 'IBM'  ");
  REQUIRE(s.text() == "  price > 100 and Symbol = 'IBM'  ");
  REQUIRE_FALSE(s.matches_everything());
}

TEST_CASE("Matches is true only for TRUE", "[selector]") {
  Event e;
  e.SetInt64("qty", 10);
  REQUIRE(MustParse("qty > 5").Matches(e));
  REQUIRE_FALSE(MustParse("qty > 50").Matches(e));
  REQUIRE_FALSE(MustParse("missing > 5").Matches(e));
  REQUIRE(MustParse("missing > 5").Evaluate(e) == Truth::kUnknown);
}

TEST_CASE("copies of a selector share one parsed tree", "[selector]") {
  Selector a = MustParse("a = 1 AND b LIKE 'x%'");
  Selector b = a;
  REQUIRE(a.program() == b.program());
  REQUIRE(b.text() == a.text());
  Selector c = std::move(b);
  REQUIRE(c.program() == a.program());
  // The copies share the text too, and each keeps it alive.
  REQUIRE(c.text().data() == a.text().data());
  a = Selector();
  REQUIRE(a.text().empty());
  REQUIRE(c.text() == "a = 1 AND b LIKE 'x%'");
}

TEST_CASE("a selector outlives the text it was parsed from", "[selector]") {
  std::optional<Selector> s;
  {
    std::string text = "name LIKE 'ab%' AND name IN ('abc', 'abd')";
    s = MustParse(text);
    text.assign(text.size(), 'z');
  }
  Event e;
  e.SetString("name", "abc");
  REQUIRE(s->Matches(e));
  REQUIRE(s->text() == "name LIKE 'ab%' AND name IN ('abc', 'abd')");
}

TEST_CASE("threads evaluate one selector concurrently", "[selector]") {
  const Selector shared = MustParse(
      "(sym = 'IBM' OR sym LIKE 'MS%') AND qty * price BETWEEN 1000 AND 1e6 AND region NOT IN "
      "('eu')");
  std::vector<Event> events(4);
  events[0]
      .SetString("sym", "IBM")
      .SetInt64("qty", 100)
      .SetDouble("price", 50)
      .SetString("region", "us");
  events[1].SetString("sym", "MSFT").SetInt64("qty", 1).SetDouble("price", 5);
  events[2].SetString("sym", "MSFT").SetInt64("qty", 10).SetDouble("price", 500);
  events[3]
      .SetString("sym", "IBM")
      .SetInt64("qty", 100)
      .SetDouble("price", 50)
      .SetString("region", "eu");
  const Truth expected[] = {Truth::kTrue, Truth::kFalse, Truth::kUnknown, Truth::kFalse};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Selector mine = shared;  // copies made concurrently share the tree
      for (int i = 0; i < 2000; ++i) {
        const size_t k = static_cast<size_t>(i + t) % events.size();
        if (mine.Evaluate(events[k]) != expected[k]) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  REQUIRE(wrong.load() == 0);
}

TEST_CASE("evaluation does not allocate", "[selector]") {
  Event e;
  e.SetString("sym", "IBM")
      .SetInt64("qty", 150)
      .SetDouble("price", 99.5)
      .SetString("region", "us-east")
      .SetBool("urgent", true);
  const std::vector<Selector> selectors = {
      MustParse("sym = 'IBM'"),
      MustParse("sym IN ('AAPL', 'IBM', 'MSFT') AND region LIKE 'us-%'"),
      MustParse("qty * price / 2 BETWEEN 1000 AND 10000 OR NOT urgent"),
      MustParse("region NOT LIKE '%west%' AND qty IN (100, 150.0) AND missing IS NULL"),
      MustParse("(qty > 100) = urgent AND -qty < 0 AND sym <> region"),
  };
  const int64_t before = testing::AllocationCount();
  int matched = 0;
  for (int i = 0; i < 100; ++i) {
    for (const Selector& s : selectors) matched += s.Matches(e) ? 1 : 0;
  }
  const int64_t after = testing::AllocationCount();
  REQUIRE(matched == 500);
  REQUIRE(after == before);
}

// ---------------------------------------------------------------------------------------------
// How the text is understood.

TEST_CASE("NOT binds tighter than AND, which binds tighter than OR", "[selector]") {
  REQUIRE(MustParse("a OR b AND NOT c").DebugString() == "(a OR (b AND (NOT c)))");
  REQUIRE(MustParse("NOT a AND b OR c").DebugString() == "(((NOT a) AND b) OR c)");
  REQUIRE(MustParse("a AND b OR c AND d").DebugString() == "((a AND b) OR (c AND d))");
  REQUIRE(MustParse("a OR b OR c").DebugString() == "(a OR b OR c)");
  REQUIRE(MustParse("NOT NOT a").DebugString() == "(NOT (NOT a))");
}

TEST_CASE("comparisons bind tighter than NOT", "[selector]") {
  REQUIRE(MustParse("NOT a = 1").DebugString() == "(NOT (a = 1))");
  REQUIRE(MustParse("NOT a BETWEEN 1 AND 2").DebugString() == "(NOT (a BETWEEN 1 AND 2))");
  REQUIRE(MustParse("NOT a IS NULL AND b").DebugString() == "((NOT (a IS NULL)) AND b)");
}

TEST_CASE("multiplication binds tighter than addition, both left to right", "[selector]") {
  REQUIRE(MustParse("a + b * c = d").DebugString() == "((a + (b * c)) = d)");
  REQUIRE(MustParse("a - b - c = d").DebugString() == "(((a - b) - c) = d)");
  REQUIRE(MustParse("a / b * c = d").DebugString() == "(((a / b) * c) = d)");
  REQUIRE(MustParse("-a * b = c").DebugString() == "(((-a) * b) = c)");
  REQUIRE(MustParse("(a + b) * c > d - e").DebugString() == "(((a + b) * c) > (d - e))");
}

TEST_CASE("BETWEEN takes its AND before the logical AND", "[selector]") {
  REQUIRE(MustParse("a BETWEEN 1 AND 2 AND b").DebugString() == "((a BETWEEN 1 AND 2) AND b)");
  REQUIRE(MustParse("a NOT BETWEEN b + 1 AND c * 2 OR d").DebugString() ==
          "((a NOT BETWEEN (b + 1) AND (c * 2)) OR d)");
}

TEST_CASE("a sign before a number is part of the literal", "[selector]") {
  REQUIRE(MustParse("a > -5").DebugString() == "(a > -5)");
  REQUIRE(MustParse("a > - 5").DebugString() == "(a > -5)");
  REQUIRE(MustParse("a > +5.5").DebugString() == "(a > 5.5)");
  REQUIRE(MustParse("a > -(5)").DebugString() == "(a > -5)");
  REQUIRE(MustParse("a = -9223372036854775808").DebugString() == "(a = -9223372036854775808)");
  REQUIRE(MustParse("a = - -9223372036854775808").DebugString() == "(a = 9.223372036854776e+18)");
  REQUIRE(MustParse("a - -5 = 0").DebugString() == "((a - -5) = 0)");
  REQUIRE(MustParse("-a = 0").DebugString() == "((-a) = 0)");
}

TEST_CASE("literals render so that they read back the same", "[selector]") {
  REQUIRE(MustParse("a = 'it''s'").DebugString() == "(a = 'it''s')");
  REQUIRE(MustParse("a = 7.").DebugString() == "(a = 7.0)");
  REQUIRE(MustParse("a = 1e300").DebugString() == "(a = 1e+300)");
  REQUIRE(MustParse("a = 0.1").DebugString() == "(a = 0.1)");
  REQUIRE(MustParse("a = 0x10").DebugString() == "(a = 16)");
  REQUIRE(MustParse("a = true OR b = False").DebugString() == "((a = TRUE) OR (b = FALSE))");
  REQUIRE(MustParse("a in ('x', 'y''z') and b not in (1, -2.5)").DebugString() ==
          "((a IN ('x', 'y''z')) AND (b NOT IN (1, -2.5)))");
  REQUIRE(MustParse("a like 'x!%' escape '!'").DebugString() == "(a LIKE 'x!%' ESCAPE '!')");
  REQUIRE(MustParse("a is not null").DebugString() == "(a IS NOT NULL)");
}

TEST_CASE("identifiers follow Java's rules, with non-ASCII letters", "[selector]") {
  Event e;
  e.SetInt64("_a$1", 1).SetInt64("$", 2).SetInt64("\xC3\xA9t\xC3\xA9", 3).SetInt64("JMSX_x", 4);
  REQUIRE(MustParse("_a$1 = 1 AND $ = 2 AND \xC3\xA9t\xC3\xA9 = 3 AND JMSX_x = 4").Matches(e));
  // Keywords are not identifiers, in any case; words that merely contain one are.
  REQUIRE(MustParse("nullable = 1 OR android = 2 OR island = 3 OR order = 4").text().size() > 0);
  REQUIRE(absl::StrContains(ParseError("null = 1"), "NULL may appear only"));
  REQUIRE(absl::StrContains(ParseError("Escape = 1"), "expected a condition, found 'Escape'"));
}

// ---------------------------------------------------------------------------------------------
// Parse errors: what was expected, and where.

struct ErrorCase {
  const char* selector;
  const char* message;
};

TEST_CASE("parse errors say what was expected and where", "[selector]") {
  const ErrorCase cases[] = {
      {"a = 1 AND b >", "selector:1:14: expected a value after '>', found end of selector"},
      {"qty > AND x", "selector:1:7: expected a value after '>', found 'AND'"},
      {"a = 1 AND", "selector:1:10: expected a condition after AND, found end of selector"},
      {"a = 1 or or b", "selector:1:10: expected a condition after OR, found 'or'"},
      {"NOT", "selector:1:4: expected a condition after NOT, found end of selector"},
      {"a =\n  = 1", "selector:2:3: expected a value after '=', found '='"},
      {"a = 1 AND\n\tb = ", "selector:2:6: expected a value after '=', found end of selector"},
      {"(a = 1", "selector:1:7: expected ')' to close the '(' at 1:1, found end of selector"},
      {"x AND\n (a = 1 b)", "selector:2:9: expected ')' to close the '(' at 2:2, found 'b'"},
      {"()", "selector:1:2: expected an expression after '(', found ')'"},
      {"a = 1)", "selector:1:6: expected AND, OR or end of selector, found ')'"},
      {"a = 1 b", "selector:1:7: expected AND, OR or end of selector, found 'b'"},
      {"a = 1 = 2", "selector:1:7: expected AND, OR or end of selector, found '='"},
      {"NOT a = 1 = 2", "selector:1:11: expected AND, OR or end of selector, found '='"},
      // Found in review: this once parsed as ((a AND (NOT (b = 1))) = 2).
      {"a AND NOT b = 1 = 2", "selector:1:17: expected AND, OR or end of selector, found '='"},
      {"a OR b AND NOT c = 1 < 2", "selector:1:22: expected AND, OR or end of selector, found '<'"},
      {"a BETWEEN 1 AND 2 = TRUE", "selector:1:19: expected AND, OR or end of selector, found '='"},
      {"a = 1 IS NULL", "selector:1:7: expected AND, OR or end of selector, found 'IS'"},
      {"a b", "selector:1:3: expected an operator, found 'b'"},
      {")", "selector:1:1: expected a condition, found ')'"},
      {"AND = 1", "selector:1:1: expected a condition, found 'AND'"},
      {"in = 1", "selector:1:1: expected a condition, found 'in'"},
      {"a = 'abc", "selector:1:5: unterminated string literal"},
      {"a = 'it''s", "selector:1:5: unterminated string literal"},
      {"a != 1", "selector:1:3: unexpected '!=': write <> for 'not equal'"},
      {"a = \"x\"", "selector:1:5: unexpected '\"': string literals use single quotes"},
      {"a = #", "selector:1:5: unexpected character '#'"},
      {"a = 1 ;", "selector:1:7: unexpected character ';'"},
      {"a = \x01", "selector:1:5: unexpected character '\\x01'"},
      {"a\xFF = 1", "selector:1:2: invalid UTF-8 byte 0xff"},
      {"a + 1", "selector:1:1: expected a condition, found an arithmetic expression"},
      {"5", "selector:1:1: expected a condition, found a number"},
      {"'abc'", "selector:1:1: expected a condition, found a string"},
      {"NOT 5", "selector:1:5: NOT needs conditions, found a number"},
      {"a AND 'x'", "selector:1:7: AND needs conditions, found a string"},
      {"a + 1 OR b", "selector:1:1: OR needs conditions, found an arithmetic expression"},
      {"s < 'M'",
       "selector:1:3: '<' compares only numbers, found a string (strings and booleans allow only "
       "= and <>)"},
      {"TRUE >= b",
       "selector:1:6: '>=' compares only numbers, found a boolean (strings and booleans allow "
       "only = and <>)"},
      {"(a > 1) < 2",
       "selector:1:9: '<' compares only numbers, found a condition (strings and booleans allow "
       "only = and <>)"},
      {"'a' + 1 = 2", "selector:1:1: '+' needs numbers, found a string"},
      {"TRUE * 1 = 2", "selector:1:1: '*' needs numbers, found a boolean"},
      {"a + (b = 1) = 2", "selector:1:6: '+' needs numbers, found a condition"},
      {"-'a' = 1", "selector:1:2: unary '-' needs numbers, found a string"},
      {"'a' BETWEEN 1 AND 2", "selector:1:1: BETWEEN needs numbers, found a string"},
      {"a BETWEEN 'x' AND 2", "selector:1:11: BETWEEN needs numbers, found a string"},
      {"a BETWEEN 1 OR 2",
       "selector:1:13: expected AND after the lower bound of BETWEEN, found 'OR'"},
      {"a BETWEEN 1 AND", "selector:1:16: expected a value after AND, found end of selector"},
      {"a NOT 5", "selector:1:7: expected BETWEEN, IN or LIKE after NOT, found '5'"},
      {"a NOT NULL", "selector:1:7: expected BETWEEN, IN or LIKE after NOT, found 'NULL'"},
      {"x IN ()", "selector:1:7: expected a string or numeric literal in the IN list, found ')'"},
      {"x IN ('a' 'b')", "selector:1:11: expected ',' or ')' in the IN list, found 'b'"},
      {"x IN ('a',)",
       "selector:1:11: expected a string or numeric literal in the IN list, found ')'"},
      {"x IN ('a', 1)", "selector:1:12: an IN list holds either strings or numbers, not both"},
      {"x IN (TRUE)",
       "selector:1:7: expected a string or numeric literal in the IN list, found 'TRUE'"},
      {"x IN (y)", "selector:1:7: expected a string or numeric literal in the IN list, found 'y'"},
      {"x IN ('a', NULL)", "selector:1:12: NULL may appear only in IS NULL and IS NOT NULL"},
      {"x IN 'a'", "selector:1:6: expected '(' after IN, found 'a'"},
      {"5 IN ('a')", "selector:1:1: IN needs an identifier on its left, found a number"},
      {"x + 1 IN (2)",
       "selector:1:1: IN needs an identifier on its left, found an arithmetic expression"},
      {"x = NULL", "selector:1:5: NULL may appear only in IS NULL and IS NOT NULL"},
      {"NULL IS NULL", "selector:1:1: NULL may appear only in IS NULL and IS NOT NULL"},
      {"x IS 5", "selector:1:6: expected NULL or NOT NULL after IS, found '5'"},
      {"x IS NOT", "selector:1:9: expected NULL or NOT NULL after IS, found end of selector"},
      {"'x' IS NULL", "selector:1:1: IS NULL needs an identifier on its left, found a string"},
      {"x LIKE y", "selector:1:8: expected a string literal pattern after LIKE, found 'y'"},
      {"5 LIKE 'x'", "selector:1:1: LIKE needs an identifier on its left, found a number"},
      {"x LIKE 'a' ESCAPE",
       "selector:1:18: expected a one-character string literal after ESCAPE, found end of "
       "selector"},
      {"x LIKE 'a' ESCAPE 'ab'", "selector:1:19: ESCAPE needs exactly one character, found 'ab'"},
      {"x LIKE 'a' ESCAPE ''", "selector:1:19: ESCAPE needs exactly one character, found ''"},
      {"x LIKE 'a\\b' ESCAPE '\\'",
       "selector:1:8: in a LIKE pattern the escape character '\\' must be followed by '_', '%' or "
       "itself, not 'b'"},
      {"x LIKE 'ab\\' ESCAPE '\\'",
       "selector:1:8: LIKE pattern ends with the escape character '\\'"},
      {"9223372036854775808 = a",
       "selector:1:1: integer literal 9223372036854775808 is out of the range of a 64-bit integer "
       "(only -9223372036854775808 is in range)"},
      {"a = 99999999999999999999",
       "selector:1:5: integer literal 99999999999999999999 is out of the range of a 64-bit "
       "integer"},
      {"a = 0x10000000000000000",
       "selector:1:5: integer literal 0x10000000000000000 is out of the range of a 64-bit "
       "integer"},
      {"a = 1e400", "selector:1:5: number 1e400 is out of the range of double"},
      {"a = 1e-400", "selector:1:5: number 1e-400 is out of the range of double"},
      {"a = 08", "selector:1:5: invalid octal literal 08"},
      {"a = 12abc", "selector:1:5: malformed number '12abc'"},
      {"a = 1.2.3", "selector:1:5: malformed number '1.2.3'"},
      {"a = 1e", "selector:1:5: malformed number '1e'"},
      {"a = 1e+", "selector:1:5: malformed number '1e+'"},
      {"a = 0x", "selector:1:5: malformed number '0x'"},
      {"a = 0x1.8p1", "selector:1:5: malformed number '0x1.8p1'"},
      {"a = 1_000", "selector:1:5: malformed number '1_000'"},
      {"a = 5LL", "selector:1:5: malformed number '5LL'"},
      {"a = .", "selector:1:5: unexpected character '.'"},
  };
  for (const ErrorCase& c : cases) {
    REQUIRE(ParseError(c.selector) == c.message);
  }
}

TEST_CASE("a long token is shortened in messages", "[selector]") {
  const std::string name(100, 'n');
  REQUIRE(ParseError("a = 1 " + name) ==
          "selector:1:7: expected AND, OR or end of selector, found "
          "'nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...'");
}

// `s = 'xx...x'`, exactly `bytes` long. REQUIRES: bytes >= 6.
std::string SelectorOfLength(size_t bytes) { return "s = '" + std::string(bytes - 6, 'x') + "'"; }

TEST_CASE("a selector longer than the length limit is refused, naming the limit", "[selector]") {
  const size_t limit = SelectorOptions::kDefaultMaxLength;
  REQUIRE(limit == 64 * 1024);
  REQUIRE(SelectorOptions().max_length == limit);
  // At the limit: fine.
  const std::string at = SelectorOfLength(limit);
  REQUIRE(at.size() == limit);
  Event e;
  e.SetString("s", std::string(limit - 6, 'x'));
  REQUIRE(MustParse(at).Matches(e));
  // One byte more: refused, positioned at the first byte beyond the limit.
  REQUIRE(ParseError(SelectorOfLength(limit + 1)) ==
          "selector:1:65537: the selector has 65537 bytes, more than the limit of 65536 "
          "(SelectorOptions::max_length)");
  // Whatever the text: unread, so no other error is found first.
  REQUIRE(ParseError(std::string(limit + 1, '\'')) ==
          "selector:1:65537: the selector has 65537 bytes, more than the limit of 65536 "
          "(SelectorOptions::max_length)");
  REQUIRE(ParseError(std::string(limit - 1, ' ') + "\n ") ==
          "selector:2:1: the selector has 65537 bytes, more than the limit of 65536 "
          "(SelectorOptions::max_length)");

  // A smaller limit, counting every byte.
  SelectorOptions five;
  five.max_length = 5;
  REQUIRE_OK(Selector::Parse("a = 1", five));
  REQUIRE_OK(Selector::Parse("", five));
  absl::StatusOr<Selector> refused = Selector::Parse("a\n= 12", five);
  REQUIRE_CODE(refused, absl::StatusCode::kInvalidArgument);
  REQUIRE(refused.status().message() ==
          "selector:2:4: the selector has 6 bytes, more than the limit of 5 "
          "(SelectorOptions::max_length)");
  // A larger one, or none.
  SelectorOptions none;
  none.max_length = SIZE_MAX;
  REQUIRE_OK(Selector::Parse(SelectorOfLength(4 * limit), none));
  SelectorOptions larger;
  larger.max_length = 2 * limit;
  REQUIRE_OK(Selector::Parse(SelectorOfLength(2 * limit), larger));
  REQUIRE_CODE(Selector::Parse(SelectorOfLength(2 * limit + 1), larger),
               absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a megabyte of '(' fails at the depth limit having allocated little", "[selector]") {
  const std::string parens(size_t{1} << 20, '(');
  // Beyond the default length limit it is refused unread.
  int64_t before = testing::AllocatedBytes();
  absl::StatusOr<Selector> refused = Selector::Parse(parens);
  int64_t allocated = testing::AllocatedBytes() - before;
  REQUIRE(refused.status().message() ==
          "selector:1:65537: the selector has 1048576 bytes, more than the limit of 65536 "
          "(SelectorOptions::max_length)");
  REQUIRE(allocated < 4096);

  // Without the limit, the parser reads no further than the depth limit: what it allocates is
  // bounded by what it accepted (tokenizing all of it first took about 200 MB).
  SelectorOptions none;
  none.max_length = SIZE_MAX;
  before = testing::AllocatedBytes();
  absl::StatusOr<Selector> deep = Selector::Parse(parens, none);
  allocated = testing::AllocatedBytes() - before;
  REQUIRE(deep.status().message() ==
          "selector:1:257: expression is nested too deeply (more than 256 levels)");
  REQUIRE(allocated < 64 * 1024);

  // Likewise for the other ways to nest, and for an early error before a long tail (here an
  // unterminated string literal of a megabyte, which is never read).
  const std::vector<std::string> texts = {
      std::string(size_t{1} << 20, '-') + "a",
      absl::StrJoin(std::vector<std::string>(size_t{1} << 18, "NOT"), " ") + " a",
      "a = = '" + std::string(size_t{1} << 20, 'x'),
      "a = 1 AND (b" + std::string(size_t{1} << 20, ' ') + "'",
  };
  const std::vector<std::string> expected = {
      "selector:1:257: expression is nested too deeply (more than 256 levels)",
      "selector:1:1025: expression is nested too deeply (more than 256 levels)",
      "selector:1:5: expected a value after '=', found '='",
      "selector:1:1048589: unterminated string literal",
  };
  for (size_t i = 0; i < texts.size(); ++i) {
    INFO("text " << i);
    before = testing::AllocatedBytes();
    absl::StatusOr<Selector> failed = Selector::Parse(texts[i], none);
    allocated = testing::AllocatedBytes() - before;
    REQUIRE(failed.status().message() == expected[i]);
    REQUIRE(allocated < 64 * 1024);
  }
}

TEST_CASE("nesting deeper than the limit is an error, not a crash", "[selector]") {
  const int limit = Selector::kMaxDepth;
  auto repeat = [](absl::string_view s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) absl::StrAppend(&out, s);
    return out;
  };
  // At the limit: fine.
  REQUIRE(MustParse(repeat("(", limit) + "a" + repeat(")", limit)).DebugString() == "a");
  MustParse(repeat("NOT ", limit - 1) + "a");
  MustParse("a" + repeat(" + a", limit - 2) + " > 1");
  MustParse(repeat("-", limit - 2) + "a > 1");
  // One more: an error naming the limit.
  const std::string too_deep = "expression is nested too deeply (more than 256 levels)";
  REQUIRE(ParseError(repeat("(", limit + 1) + "a" + repeat(")", limit + 1)) ==
          "selector:1:257: " + too_deep);
  REQUIRE(absl::StrContains(ParseError(repeat("NOT ", limit + 1) + "a"), too_deep));
  REQUIRE(absl::StrContains(ParseError("a" + repeat(" + a", limit) + " > 1"), too_deep));
  REQUIRE(absl::StrContains(ParseError(repeat("-", limit + 1) + "a > 1"), too_deep));
  REQUIRE(
      absl::StrContains(ParseError(repeat("a = (", limit) + "a" + repeat(")", limit)), too_deep));
  // Far beyond it (within the default length limit): still an error, found without deep
  // recursion.
  REQUIRE(absl::StrContains(ParseError(repeat("(", 60000)), too_deep));
  REQUIRE(absl::StrContains(ParseError(repeat("NOT ", 15000) + "a"), too_deep));
  REQUIRE(absl::StrContains(ParseError(repeat("-", 60000) + "a"), too_deep));
  REQUIRE(absl::StrContains(ParseError("a" + repeat(" * a", 15000) + " > 1"), too_deep));
}

TEST_CASE("long flat conjunctions and lists are limited only by the length", "[selector]") {
  std::string text = "a0 = 0";
  for (int i = 1; i < 5000; ++i) absl::StrAppend(&text, " AND a", i, " = ", i);
  SelectorOptions unlimited;
  unlimited.max_length = SIZE_MAX;
  absl::StatusOr<Selector> parsed = Selector::Parse(text, unlimited);
  REQUIRE_OK(parsed);
  const Selector& s = *parsed;
  REQUIRE(Viewed(s).conjuncts.size() == 5000);
  Event e;
  for (int i = 0; i < 5000; ++i) e.SetInt64(absl::StrCat("a", i), i);
  REQUIRE(s.Matches(e));

  std::string in = "x IN ('v0'";
  for (int i = 1; i < 5000; ++i) absl::StrAppend(&in, ", 'v", i, "'");
  in += ")";
  Event f;
  f.SetString("x", "v4321");
  REQUIRE(MustParse(in).Matches(f));
}

// Runs `fn` on a thread with a stack of `bytes`.
void RunWithStack(size_t bytes, const std::function<void()>& fn) {
  pthread_attr_t attr;
  REQUIRE(pthread_attr_init(&attr) == 0);
  REQUIRE(pthread_attr_setstacksize(&attr, bytes) == 0);
  pthread_t thread;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<const std::function<void()>*>(arg))();
    return nullptr;
  };
  REQUIRE(pthread_create(&thread, &attr, trampoline, const_cast<std::function<void()>*>(&fn)) == 0);
  REQUIRE(pthread_join(thread, nullptr) == 0);
  pthread_attr_destroy(&attr);
}

TEST_CASE("the deepest selectors parse and evaluate on a 1 MiB thread stack", "[selector]") {
  const int limit = Selector::kMaxDepth;
  std::vector<std::string> texts;
  auto repeat = [](absl::string_view s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) absl::StrAppend(&out, s);
    return out;
  };
  texts.push_back(repeat("(", limit) + "a" + repeat(")", limit));
  texts.push_back(repeat("NOT ", limit - 1) + "a");
  texts.push_back(repeat("(NOT ", limit / 2) + "a" + repeat(")", limit / 2));
  texts.push_back(repeat("a = (", limit / 2 - 1) + "a" + repeat(")", limit / 2 - 1));
  texts.push_back(repeat("-(", limit / 2) + "a" + repeat(")", limit / 2) + " > 0");
  texts.push_back("a" + repeat(" + a", limit - 2) + " > 1");
  texts.push_back(repeat("(", limit + 1) + "a" + repeat(")", limit + 1));  // an error
  std::atomic<int> parsed{0};
  RunWithStack(1 << 20, [&] {
    Event e;
    e.SetBool("a", true);
    for (const std::string& text : texts) {
      auto s = Selector::Parse(text);
      if (s.ok()) {
        s->Evaluate(e);
        parsed.fetch_add(1);
      }
    }
  });
  REQUIRE(parsed.load() == static_cast<int>(texts.size()) - 1);
}

// ---------------------------------------------------------------------------------------------
// The AST seen by the matcher.

TEST_CASE("conjuncts flatten top-level ANDs, parenthesized or not", "[selector]") {
  Selector s = MustParse(
      "a = 1 AND (b > 2 AND c IN ('x', 'y')) AND 5 < d AND e BETWEEN 1 AND 2.5 AND f <> 3 AND "
      "g LIKE 'x%' AND -5 >= h AND 'k' = i");
  const Viewed v(s);
  const selector_program::ViewNodes& conjuncts = v.conjuncts;
  REQUIRE(conjuncts.size() == 9);

  auto a = AsIndexable(v.view, *conjuncts[0]);
  REQUIRE(a.has_value());
  REQUIRE(a->kind == IndexableConjunct::Kind::kEqual);
  REQUIRE(a->attribute == "a");
  REQUIRE(a->values[0] == AttributeValue(int64_t{1}));

  auto b = AsIndexable(v.view, *conjuncts[1]);
  REQUIRE(b->kind == IndexableConjunct::Kind::kRange);
  REQUIRE(b->attribute == "b");
  REQUIRE(*b->lower == AttributeValue(int64_t{2}));
  REQUIRE_FALSE(b->lower_inclusive);
  REQUIRE(b->upper == nullptr);

  auto c = AsIndexable(v.view, *conjuncts[2]);
  REQUIRE(c->kind == IndexableConjunct::Kind::kIn);
  REQUIRE(c->values.size() == 2);
  REQUIRE(c->values[1] == AttributeValue(std::string("y")));

  auto d = AsIndexable(v.view, *conjuncts[3]);  // 5 < d is d > 5
  REQUIRE(d->attribute == "d");
  REQUIRE(*d->lower == AttributeValue(int64_t{5}));
  REQUIRE_FALSE(d->lower_inclusive);

  auto e = AsIndexable(v.view, *conjuncts[4]);
  REQUIRE(e->kind == IndexableConjunct::Kind::kRange);
  REQUIRE(*e->lower == AttributeValue(int64_t{1}));
  REQUIRE(*e->upper == AttributeValue(2.5));
  REQUIRE(e->lower_inclusive);
  REQUIRE(e->upper_inclusive);

  REQUIRE_FALSE(AsIndexable(v.view, *conjuncts[5]).has_value());  // <>
  REQUIRE_FALSE(AsIndexable(v.view, *conjuncts[6]).has_value());  // LIKE

  auto h = AsIndexable(v.view, *conjuncts[7]);  // -5 >= h is h <= -5
  REQUIRE(h->attribute == "h");
  REQUIRE(h->lower == nullptr);
  REQUIRE(*h->upper == AttributeValue(int64_t{-5}));
  REQUIRE(h->upper_inclusive);

  auto i = AsIndexable(v.view, *conjuncts[8]);
  REQUIRE(i->kind == IndexableConjunct::Kind::kEqual);
  REQUIRE(i->attribute == "i");
  REQUIRE(i->values[0] == AttributeValue(std::string("k")));
}

TEST_CASE("only plain comparisons with literals are indexable", "[selector]") {
  for (absl::string_view text :
       {"a = 1 OR b = 2", "NOT a = 1", "a NOT IN ('x')", "a NOT BETWEEN 1 AND 2",
        "a BETWEEN b AND 2", "a + 1 = 2", "a = b", "1 = 1", "a IS NULL", "a", "TRUE"}) {
    Selector s = MustParse(text);
    const Viewed v(s);
    const selector_program::ViewNodes& conjuncts = v.conjuncts;
    INFO(text);
    REQUIRE(conjuncts.size() == 1);
    REQUIRE_FALSE(AsIndexable(v.view, *conjuncts[0]).has_value());
  }
  REQUIRE(Viewed(MustParse("")).conjuncts.empty());
}

// ---------------------------------------------------------------------------------------------
// Building blocks.

TEST_CASE("int64 and double compare by exact value", "[selector]") {
  constexpr double kTwo53 = 9007199254740992.0;
  constexpr double kTwo63 = 9223372036854775808.0;
  REQUIRE(CompareInt64Double(1, 1.0) == 0);
  REQUIRE(CompareInt64Double(1, 1.5) < 0);
  REQUIRE(CompareInt64Double(2, 1.5) > 0);
  REQUIRE(CompareInt64Double(-1, -1.5) > 0);
  REQUIRE(CompareInt64Double(-2, -1.5) < 0);
  REQUIRE(CompareInt64Double(0, -0.0) == 0);
  REQUIRE(CompareInt64Double(9007199254740993, kTwo53) > 0);
  REQUIRE(CompareInt64Double(9007199254740992, kTwo53) == 0);
  REQUIRE(CompareInt64Double(INT64_MAX, kTwo63) < 0);
  REQUIRE(CompareInt64Double(INT64_MIN, -kTwo63) == 0);
  REQUIRE(CompareInt64Double(INT64_MIN, -kTwo63 * 2) > 0);
  REQUIRE(CompareInt64Double(INT64_MAX, std::numeric_limits<double>::infinity()) < 0);
  REQUIRE(CompareInt64Double(INT64_MIN, -std::numeric_limits<double>::infinity()) > 0);
  REQUIRE(CompareInt64Double(0, std::numeric_limits<double>::denorm_min()) < 0);
  REQUIRE(CompareInt64Double(0, -std::numeric_limits<double>::denorm_min()) > 0);
}

TEST_CASE("UTF-8 characters are measured without reading past the end", "[selector]") {
  REQUIRE(Utf8CharLength("a", 0) == 1);
  REQUIRE(Utf8CharLength("\xC3\xA9", 0) == 2);
  REQUIRE(Utf8CharLength("\xE6\x97\xA5", 0) == 3);
  REQUIRE(Utf8CharLength("\xF0\x9F\x98\x80", 0) == 4);
  REQUIRE(Utf8CharLength("\xE6\x97", 0) == 1);          // truncated
  REQUIRE(Utf8CharLength("\xA9", 0) == 1);              // stray continuation byte
  REQUIRE(Utf8CharLength("\xC0\x80", 0) == 1);          // overlong
  REQUIRE(Utf8CharLength("\xED\xA0\x80", 0) == 1);      // surrogate
  REQUIRE(Utf8CharLength("\xF4\x90\x80\x80", 0) == 1);  // above U+10FFFF
  REQUIRE(Utf8CharLength("\xFF", 0) == 1);
}

// A reference LIKE matcher: dynamic programming over characters, written independently of
// LikePattern's greedy algorithm.
bool ReferenceLike(absl::string_view text, absl::string_view pattern, absl::string_view escape) {
  struct Item {
    enum { kLiteral, kOne, kAny } kind;
    std::string ch;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < pattern.size();) {
    std::string ch(pattern.substr(i, Utf8CharLength(pattern, i)));
    i += ch.size();
    if (!escape.empty() && ch == escape) {
      std::string next(pattern.substr(i, Utf8CharLength(pattern, i)));
      i += next.size();
      items.push_back({Item::kLiteral, next});
    } else if (ch == "_") {
      items.push_back({Item::kOne, ""});
    } else if (ch == "%") {
      items.push_back({Item::kAny, ""});
    } else {
      items.push_back({Item::kLiteral, ch});
    }
  }
  std::vector<std::string> chars;
  for (size_t i = 0; i < text.size();) {
    chars.emplace_back(text.substr(i, Utf8CharLength(text, i)));
    i += chars.back().size();
  }
  // ok[j] after processing k items: items[0..k) match chars[0..j).
  std::vector<bool> ok(chars.size() + 1, false);
  ok[0] = true;
  for (const Item& item : items) {
    std::vector<bool> next(chars.size() + 1, false);
    for (size_t j = 0; j <= chars.size(); ++j) {
      if (item.kind == Item::kAny) {
        next[j] = ok[j] || (j > 0 && next[j - 1]);
      } else if (j > 0 && ok[j - 1]) {
        next[j] = item.kind == Item::kOne || chars[j - 1] == item.ch;
      }
    }
    ok = std::move(next);
  }
  return ok[chars.size()];
}

TEST_CASE("LIKE agrees with a reference matcher on random patterns", "[selector]") {
  const std::vector<std::string> pattern_chars = {"a", "b", "_", "%", "\xC3\xA9", "!"};
  const std::vector<std::string> text_chars = {"a", "b", "_", "%", "\xC3\xA9", "!", "\xC3"};
  for (uint64_t seed : Seeds(500, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 500; ++iter) {
      std::string pattern;
      const std::string escape = rng.OneIn(3) ? "!" : "";
      for (uint64_t n = rng.Uniform(8); n > 0; --n) {
        const std::string& ch = pattern_chars[rng.Uniform(pattern_chars.size())];
        pattern += ch;
        if (!escape.empty() && ch == escape) {
          pattern += std::string(1, "_%!"[rng.Uniform(3)]);  // keep the pattern valid
        }
      }
      std::string text;
      for (uint64_t n = rng.Uniform(10); n > 0; --n) {
        text += text_chars[rng.Uniform(text_chars.size())];
      }
      auto compiled = LikePattern::Compile(pattern, escape);
      INFO("pattern '" << pattern << "' escape '" << escape << "' text '" << text << "'");
      REQUIRE_OK(compiled);
      REQUIRE(compiled->Matches(text) == ReferenceLike(text, pattern, escape));
    }
  }
}

// Pieces for random LIKE patterns and texts: ASCII, well-formed multibyte characters, and bytes
// that are characters of their own (a lone lead byte, continuation bytes) but join with others
// into well-formed sequences ("\xE2" "\x82" "\xAC" is "€").
const char* const kLikePieces[] = {"a",        "b",
                                   "_",        "%",
                                   "!",        "\\",
                                   "\xC3\xA9", "\xE2\x82\xAC",
                                   "\xE2",     "\x82",
                                   "\xAC",     "\xC3",
                                   "\xA9",     "\xF0\x9F\x98\x80",
                                   "\xF0\x9F"};
// Escape characters: none, ASCII, the wildcards themselves, a continuation byte, multibyte.
const char* const kLikeEscapes[] = {"",  "",     "!",        "\\",          "%",
                                    "_", "\x82", "\xC3\xA9", "\xE2\x82\xAC"};

// A selector string literal holding `s` (with ' doubled).
std::string Quoted(absl::string_view s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

TEST_CASE("LIKE agrees with a reference matcher on random bytes, escapes and NULLs",
          "[selector][random]") {
  int compiled = 0;
  int matched = 0;
  for (uint64_t seed : Seeds(700, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 2000; ++iter) {
      // Short texts over every piece, or long ones over few, where literal runs recur.
      const bool long_text = rng.OneIn(4);
      const size_t alphabet = long_text ? 2 + rng.Uniform(3) : std::size(kLikePieces);
      const size_t offset = rng.Uniform(std::size(kLikePieces) - alphabet + 1);
      auto piece = [&] { return std::string(kLikePieces[offset + rng.Uniform(alphabet)]); };
      const std::string escape = kLikeEscapes[rng.Uniform(std::size(kLikeEscapes))];
      std::string pattern;
      for (uint64_t n = rng.Uniform(long_text ? 24 : 10); n > 0; --n) {
        if (!escape.empty() && rng.OneIn(6)) {
          pattern += escape + std::string(rng.OneIn(3) ? escape : rng.OneIn(2) ? "_" : "%");
        } else {
          pattern += rng.OneIn(long_text ? 8 : 4) ? std::string(rng.OneIn(2) ? "%" : "_") : piece();
        }
      }
      std::string text;
      if (rng.OneIn(2)) {
        // Random pieces.
        for (uint64_t n = rng.Uniform(long_text ? 300 : 12); n > 0; --n) text += piece();
      } else {
        // The pattern filled in (a near match): `%` by pieces, `_` by a piece, an escaped
        // character by itself; then perhaps one piece more or changed.
        for (size_t i = 0; i < pattern.size();) {
          const absl::string_view ch =
              absl::string_view(pattern).substr(i, Utf8CharLength(pattern, i));
          i += ch.size();
          if (!escape.empty() && ch == escape && i < pattern.size()) {
            const size_t len = Utf8CharLength(pattern, i);
            text += pattern.substr(i, len);
            i += len;
          } else if (ch == "%") {
            for (uint64_t n = rng.Uniform(long_text ? 30 : 3); n > 0; --n) text += piece();
          } else if (ch == "_") {
            text += piece();
          } else {
            text += std::string(ch);
          }
        }
        if (rng.OneIn(2)) text.insert(rng.Uniform(text.size() + 1), piece());
      }
      INFO("pattern '" << absl::CHexEscape(pattern) << "' escape '" << absl::CHexEscape(escape)
                       << "' text '" << absl::CHexEscape(text) << "'");
      absl::StatusOr<LikePattern> p = LikePattern::Compile(pattern, escape);
      if (!p.ok()) continue;  // pieces joined around an escape character can misuse it
      ++compiled;
      const bool expected = ReferenceLike(text, pattern, escape);
      matched += expected ? 1 : 0;
      REQUIRE(p->Matches(text) == expected);
      if (p->is_prefix()) REQUIRE(absl::StartsWith(text, p->literal_prefix()) == expected);

      // Through a selector, with three-valued logic: a NULL attribute is UNKNOWN for LIKE and
      // NOT LIKE, a number FALSE for both.
      if (iter % 4 != 0) continue;
      const std::string tail =
          absl::StrCat(" LIKE ", Quoted(pattern), escape.empty() ? "" : " ESCAPE ",
                       escape.empty() ? "" : Quoted(escape));
      const Selector like = MustParse("s" + tail);
      const Selector not_like = MustParse("s NOT" + tail);
      Event with_text;
      with_text.SetString("s", text);
      Event with_number;
      with_number.SetInt64("s", 1);
      const Event without;
      REQUIRE(like.Evaluate(with_text) == (expected ? Truth::kTrue : Truth::kFalse));
      REQUIRE(not_like.Evaluate(with_text) == (expected ? Truth::kFalse : Truth::kTrue));
      REQUIRE(like.Evaluate(without) == Truth::kUnknown);
      REQUIRE(not_like.Evaluate(without) == Truth::kUnknown);
      REQUIRE(like.Evaluate(with_number) == Truth::kFalse);
      REQUIRE(not_like.Evaluate(with_number) == Truth::kFalse);
    }
  }
  // The generator is useful: most patterns compile, and a fair share match.
  REQUIRE(compiled > 25000);
  REQUIRE(matched > compiled / 5);
}

TEST_CASE("a LIKE literal matches whole characters of the text, not their first bytes",
          "[selector]") {
  // "€" is E2 82 AC, one character; a pattern's lone E2 (one character too) is not it.
  const std::string euro = "\xE2\x82\xAC";
  auto like = [](absl::string_view pattern, absl::string_view text) {
    absl::StatusOr<LikePattern> p = LikePattern::Compile(pattern, "");
    REQUIRE_OK(p);
    return p->Matches(text);
  };
  REQUIRE_FALSE(like("\xE2__", euro));
  REQUIRE_FALSE(like("\xE2%", euro));
  REQUIRE_FALSE(like("%\x82\xAC", euro));
  REQUIRE_FALSE(like("%\x82%", euro));
  REQUIRE_FALSE(like("_\x82\xAC", euro));
  REQUIRE(like("_", euro));
  REQUIRE(like("%\xE2\x82\xAC%", "a" + euro + "b"));
  REQUIRE(like("\xE2%",
               "\xE2"
               "a"));
  REQUIRE(like("%\xE2", "a\xE2"));
  REQUIRE(like("%\x82%",
               "\xE2\x82"
               "a"));                                 // E2 82 61 is no sequence: three characters
  REQUIRE_FALSE(like("%\x82%", "\xE2\xE2\x82\x82"));  // E2, then E2 82 82 (U+2082)
}

TEST_CASE("UTF-8 character starts are found from either side", "[selector][random]") {
  for (uint64_t seed : Seeds(800, 10)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 2000; ++iter) {
      std::string s;
      for (uint64_t n = rng.Uniform(12); n > 0; --n)
        s += kLikePieces[rng.Uniform(std::size(kLikePieces))];
      INFO("bytes '" << absl::CHexEscape(s) << "'");
      std::vector<bool> start(s.size() + 1, false);
      std::vector<size_t> starts = {0};
      for (size_t i = 0; i < s.size(); i += Utf8CharLength(s, i)) {
        start[i] = true;
        if (i > 0) starts.push_back(i);
      }
      start[s.size()] = true;
      if (!s.empty()) starts.push_back(s.size());
      for (size_t i = 0; i <= s.size(); ++i) REQUIRE(IsUtf8CharStart(s, i) == start[i]);
      for (size_t k = 1; k < starts.size(); ++k) {
        REQUIRE(PreviousUtf8CharStart(s, starts[k]) == starts[k - 1]);
      }
    }
  }
}

TEST_CASE("LIKE patterns expose their literal prefix", "[selector]") {
  auto p = LikePattern::Compile("ab\\_c%d_", "\\");
  REQUIRE_OK(p);
  REQUIRE(p->literal_prefix() == "ab_c");
  REQUIRE_FALSE(p->is_exact());
  auto exact = LikePattern::Compile("a!%b", "!");
  REQUIRE_OK(exact);
  REQUIRE(exact->is_exact());
  REQUIRE(exact->literal_prefix() == "a%b");
  auto none = LikePattern::Compile("%x", "");
  REQUIRE(none->literal_prefix().empty());
}

TEST_CASE("LIKE takes polynomial time on adversarial patterns", "[selector]") {
  // Exponential backtracking would never finish these.
  const std::string text(20000, 'a');
  auto p = LikePattern::Compile("%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%a%b", "");
  REQUIRE_OK(p);
  REQUIRE_FALSE(p->Matches(text));
  auto q = LikePattern::Compile(std::string(200, '%') + "_" + std::string(200, '%'), "");
  REQUIRE(q->Matches(text));
}

// ---------------------------------------------------------------------------------------------
// Properties over random input.

// A random selector-ish string: mostly valid tokens in random order.
std::string TokenSoup(Rng& rng) {
  static const char* const kTokens[] = {
      "a",        "b",       "s",     "x",
      "NOT",      "AND",     "OR",    "BETWEEN",
      "LIKE",     "IN",      "IS",    "NULL",
      "ESCAPE",   "TRUE",    "FALSE", "(",
      ")",        ",",       "=",     "<>",
      "<",        "<=",      ">",     ">=",
      "+",        "-",       "*",     "/",
      "0",        "1",       "-5",    "2.5",
      "1e3",      ".5",      "7.",    "0x1F",
      "017",      "57L",     "'a'",   "'%b_'",
      "'\\'",     "''''",    "'x",    "9223372036854775808",
      "1e999",    "!",       "\"",    "#",
      "\xC3\xA9", "\xFF",    "\n",    "not",
      "and",      "Between",
  };
  std::string out;
  for (uint64_t n = rng.Uniform(25); n > 0; --n) {
    out += kTokens[rng.Uniform(std::size(kTokens))];
    if (!rng.OneIn(5)) out += ' ';
  }
  return out;
}

std::string RandomBytes(Rng& rng) {
  std::string out(rng.Uniform(40), '\0');
  for (char& c : out) c = static_cast<char>(rng.Uniform(256));
  return out;
}

std::vector<Event> ProbeEvents() {
  std::vector<Event> events(4);
  events[0].SetInt64("a", 1).SetInt64("b", 2).SetString("s", "ab").SetBool("x", true);
  events[1].SetDouble("a", 2.5).SetString("b", "b").SetInt64("s", 3);
  events[2].SetDouble("a", std::numeric_limits<double>::quiet_NaN()).SetBool("b", false);
  return events;
}

// Checks the invariants every parsed selector must keep.
void CheckParsed(const Selector& s, const std::vector<Event>& events) {
  const std::string debug = s.DebugString();
  auto reparsed = Selector::Parse(debug);
  INFO("understood as: " << debug);
  if (!reparsed.ok()) {
    // Only the added parentheses may push a deep selector over the limit.
    REQUIRE(absl::StrContains(reparsed.status().message(), "nested too deeply"));
    return;
  }
  REQUIRE(reparsed->DebugString() == debug);
  for (const Event& e : events) {
    REQUIRE(reparsed->Evaluate(e) == s.Evaluate(e));
    REQUIRE(s.Matches(e) == (s.Evaluate(e) == Truth::kTrue));
  }
  if (!s.matches_everything() && debug.size() < 10000) {
    auto negated = Selector::Parse("NOT " + debug);
    if (negated.ok()) {
      for (const Event& e : events) REQUIRE(negated->Evaluate(e) == Negation(s.Evaluate(e)));
    }
  }
}

TEST_CASE("random token soups parse or fail cleanly", "[selector][random]") {
  const std::vector<Event> events = ProbeEvents();
  int parsed = 0;
  for (uint64_t seed : Seeds(1000, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 2000; ++iter) {
      const std::string text = TokenSoup(rng);
      INFO("selector: " << text);
      auto s = Selector::Parse(text);
      if (s.ok()) {
        ++parsed;
        CheckParsed(*s, events);
      } else {
        REQUIRE(s.status().code() == absl::StatusCode::kInvalidArgument);
        REQUIRE(absl::StartsWith(s.status().message(), "selector:"));
      }
    }
  }
  REQUIRE(parsed > 0);  // the soup is not all errors
}

TEST_CASE("random bytes parse or fail cleanly", "[selector][random]") {
  const std::vector<Event> events = ProbeEvents();
  for (uint64_t seed : Seeds(2000, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 2000; ++iter) {
      const std::string text = RandomBytes(rng);
      auto s = Selector::Parse(text);
      if (s.ok()) {
        CheckParsed(*s, events);
      } else {
        REQUIRE(s.status().code() == absl::StatusCode::kInvalidArgument);
        REQUIRE(absl::StartsWith(s.status().message(), "selector:"));
      }
    }
  }
}

// A reference parser for the grammar in lib/selector/parser.h, written as textbook recursive
// descent (one function per rule), independently of the precedence-climbing parser. It checks
// syntax only, not types, and renders its tree the way DebugString() does. Tokens are separated
// by single spaces.
class ReferenceParser {
 public:
  explicit ReferenceParser(absl::string_view text) : tokens_(absl::StrSplit(text, ' ')) {}

  // The rendering, or nullopt on a syntax error.
  std::optional<std::string> Parse() {
    std::optional<std::string> r = Or();
    if (!r || pos_ != tokens_.size()) return std::nullopt;
    return r;
  }

 private:
  std::string Peek(size_t ahead = 0) const {
    return pos_ + ahead < tokens_.size() ? tokens_[pos_ + ahead] : "";
  }
  bool Accept(absl::string_view t) {
    if (Peek() != t) return false;
    ++pos_;
    return true;
  }
  static bool IsNumber(absl::string_view t) { return !t.empty() && absl::ascii_isdigit(t[0]); }
  static bool IsLiteral(absl::string_view t) {
    return IsNumber(t) || (!t.empty() && t[0] == '\'') || t == "TRUE" || t == "FALSE";
  }
  static bool IsIdentifier(absl::string_view t) { return t == "a" || t == "b"; }

  std::optional<std::string> Chain(absl::string_view op,
                                   std::optional<std::string> (ReferenceParser::*next)()) {
    std::optional<std::string> first = (this->*next)();
    if (!first || Peek() != op) return first;
    std::vector<std::string> parts = {*first};
    while (Accept(op)) {
      std::optional<std::string> more = (this->*next)();
      if (!more) return std::nullopt;
      parts.push_back(*more);
    }
    return absl::StrCat("(", absl::StrJoin(parts, absl::StrCat(" ", op, " ")), ")");
  }
  std::optional<std::string> Or() { return Chain("OR", &ReferenceParser::And); }
  std::optional<std::string> And() { return Chain("AND", &ReferenceParser::Not); }
  std::optional<std::string> Not() {
    if (!Accept("NOT")) return Predicate();
    std::optional<std::string> operand = Not();
    if (!operand) return std::nullopt;
    return absl::StrCat("(NOT ", *operand, ")");
  }
  std::optional<std::string> Predicate() {
    std::optional<std::string> lhs = Sum();
    if (!lhs) return std::nullopt;
    const bool is_identifier = IsIdentifier(*lhs);  // `(a) IN (...)` is fine too
    for (absl::string_view op : {"=", "<>", "<", "<=", ">", ">="}) {
      if (Accept(op)) {
        std::optional<std::string> rhs = Sum();
        if (!rhs) return std::nullopt;
        return absl::StrCat("(", *lhs, " ", op, " ", *rhs, ")");
      }
    }
    const bool negated = Peek() == "NOT";
    if (negated) ++pos_;
    const std::string neg = negated ? " NOT" : "";
    if (Accept("BETWEEN")) {
      std::optional<std::string> low = Sum();
      if (!low || !Accept("AND")) return std::nullopt;
      std::optional<std::string> high = Sum();
      if (!high) return std::nullopt;
      return absl::StrCat("(", *lhs, neg, " BETWEEN ", *low, " AND ", *high, ")");
    }
    if (Accept("IN")) {
      if (!is_identifier || !Accept("(")) return std::nullopt;
      std::vector<std::string> items;
      do {
        std::string sign = (Peek() == "-" || Peek() == "+") && IsNumber(Peek(1)) ? Peek() : "";
        if (!sign.empty()) ++pos_;
        if (!IsNumber(Peek()) && Peek().rfind('\'', 0) != 0) return std::nullopt;
        items.push_back((sign == "-" ? "-" : "") + Peek());
        ++pos_;
      } while (Accept(","));
      if (!Accept(")")) return std::nullopt;
      return absl::StrCat("(", *lhs, neg, " IN (", absl::StrJoin(items, ", "), "))");
    }
    if (Accept("LIKE")) {
      if (!is_identifier || Peek().rfind('\'', 0) != 0) return std::nullopt;
      std::string out = absl::StrCat("(", *lhs, neg, " LIKE ", Peek());
      ++pos_;
      if (Accept("ESCAPE")) {
        if (Peek().rfind('\'', 0) != 0) return std::nullopt;
        absl::StrAppend(&out, " ESCAPE ", Peek());
        ++pos_;
      }
      return out + ")";
    }
    if (negated) return std::nullopt;
    if (Accept("IS")) {
      const bool is_not = Accept("NOT");
      if (!is_identifier || !Accept("NULL")) return std::nullopt;
      return absl::StrCat("(", *lhs, is_not ? " IS NOT NULL" : " IS NULL", ")");
    }
    return lhs;
  }
  std::optional<std::string> Binary(std::initializer_list<absl::string_view> ops,
                                    std::optional<std::string> (ReferenceParser::*next)()) {
    std::optional<std::string> lhs = (this->*next)();
    while (lhs) {
      const std::string op = Peek();
      if (std::find(ops.begin(), ops.end(), op) == ops.end()) break;
      ++pos_;
      std::optional<std::string> rhs = (this->*next)();
      if (!rhs) return std::nullopt;
      lhs = absl::StrCat("(", *lhs, " ", op, " ", *rhs, ")");
    }
    return lhs;
  }
  std::optional<std::string> Sum() { return Binary({"+", "-"}, &ReferenceParser::Product); }
  std::optional<std::string> Product() { return Binary({"*", "/"}, &ReferenceParser::Unary); }
  std::optional<std::string> Unary() {
    const std::string op = Peek();
    if (op != "+" && op != "-") return Primary();
    ++pos_;
    std::optional<std::string> operand = Unary();
    if (!operand) return std::nullopt;
    // A sign on a number (written directly or in parentheses) folds into the literal.
    if (IsNumber(*operand)) return op == "-" ? "-" + *operand : *operand;
    if (operand->size() > 1 && (*operand)[0] == '-' && IsNumber(operand->substr(1))) {
      return op == "-" ? operand->substr(1) : *operand;
    }
    return absl::StrCat("(", op, *operand, ")");
  }
  std::optional<std::string> Primary() {
    const std::string t = Peek();
    if (IsIdentifier(t) || IsLiteral(t)) {
      ++pos_;
      return t;
    }
    if (!Accept("(")) return std::nullopt;
    std::optional<std::string> inner = Or();
    if (!inner || !Accept(")")) return std::nullopt;
    return inner;
  }

  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

TEST_CASE("the parser agrees with a textbook recursive-descent reference", "[selector][random]") {
  static const char* const kVocabulary[] = {
      "a", "b", "1", "2", "'x'", "TRUE",    "NOT", "AND",  "OR", "=",    "<>", "<",      "+",
      "-", "*", "/", "(", ")",   "BETWEEN", "IN",  "LIKE", "IS", "NULL", ",",  "ESCAPE", "'%'"};
  // Token sequences: grammatical ones without parentheses (where precedence decides), then a
  // few random edits, or plain random soups.
  std::function<void(Rng&, int, std::vector<std::string>*)> value, condition;
  value = [&](Rng& rng, int depth, std::vector<std::string>* out) {
    switch (rng.Uniform(depth > 2 ? 3 : 6)) {
      case 0: out->push_back("a"); break;
      case 1: out->push_back(rng.OneIn(2) ? "1" : "'x'"); break;
      case 2: out->push_back("b"); break;
      case 3:
        out->push_back("-");
        value(rng, depth + 1, out);
        break;
      default:
        value(rng, depth + 1, out);
        out->push_back(kVocabulary[11 + rng.Uniform(4)]);  // + - * /
        value(rng, depth + 1, out);
    }
  };
  condition = [&](Rng& rng, int depth, std::vector<std::string>* out) {
    switch (rng.Uniform(depth > 2 ? 4 : 9)) {
      case 0:
        value(rng, depth + 1, out);
        out->push_back(kVocabulary[9 + rng.Uniform(3)]);  // = <> <
        value(rng, depth + 1, out);
        break;
      case 1: out->insert(out->end(), {"a", "IS", "NULL"}); break;
      case 2: out->push_back(rng.OneIn(2) ? "b" : "TRUE"); break;
      case 3:
        value(rng, depth + 1, out);
        out->push_back("BETWEEN");
        value(rng, depth + 1, out);
        out->push_back("AND");
        value(rng, depth + 1, out);
        break;
      case 4:
        out->push_back("NOT");
        condition(rng, depth + 1, out);
        break;
      case 5:
      case 6:
        condition(rng, depth + 1, out);
        out->push_back(rng.OneIn(2) ? "AND" : "OR");
        condition(rng, depth + 1, out);
        break;
      case 7: out->insert(out->end(), {"a", "NOT", "IN", "(", "'x'", ",", "'%'", ")"}); break;
      default: out->insert(out->end(), {"(", "a", "LIKE", "'%'", ")"}); break;
    }
  };
  int agreed = 0;
  for (uint64_t seed : Seeds(4000, 20)) {
    INFO("seed " << seed);
    Rng rng(seed);
    for (int iter = 0; iter < 5000; ++iter) {
      std::vector<std::string> tokens;
      if (rng.OneIn(4)) {
        for (uint64_t n = 1 + rng.Uniform(12); n > 0; --n) {
          tokens.push_back(kVocabulary[rng.Uniform(std::size(kVocabulary))]);
        }
      } else {
        condition(rng, 0, &tokens);
        for (uint64_t edits = rng.Uniform(3); edits > 0; --edits) {
          const size_t at = rng.Uniform(tokens.size() + 1);
          const std::string token = kVocabulary[rng.Uniform(std::size(kVocabulary))];
          switch (rng.Uniform(3)) {
            case 0: tokens.insert(tokens.begin() + static_cast<ptrdiff_t>(at), token); break;
            case 1:
              if (at < tokens.size()) tokens[at] = token;
              break;
            default:
              if (at < tokens.size()) tokens.erase(tokens.begin() + static_cast<ptrdiff_t>(at));
          }
        }
        if (tokens.empty()) tokens.push_back("a");
      }
      const std::string text = absl::StrJoin(tokens, " ");
      INFO("selector: " << text);
      auto mine = Selector::Parse(text);
      std::optional<std::string> reference = ReferenceParser(text).Parse();
      if (mine.ok()) {
        // What gryph accepts is grammatical, and understood the same way.
        REQUIRE(reference.has_value());
        REQUIRE(mine->DebugString() == *reference);
        ++agreed;
      } else if (!reference.has_value()) {
        // Both reject it: fine.
      } else {
        // Only a type error may reject what the grammar accepts.
        INFO(mine.status().message());
        REQUIRE((absl::StrContains(mine.status().message(), "needs") ||
                 absl::StrContains(mine.status().message(), "compares only numbers") ||
                 absl::StrContains(mine.status().message(), "expected a condition, found a") ||
                 absl::StrContains(mine.status().message(), "an IN list holds") ||
                 absl::StrContains(mine.status().message(), "LIKE pattern") ||
                 absl::StrContains(mine.status().message(), "ESCAPE needs") ||
                 absl::StrContains(mine.status().message(), "NULL may appear only")));
      }
    }
  }
  REQUIRE(agreed > 20000);
}

// Random well-formed conditions over attributes a, b, c, for the equivalence checks below.
class ConditionGenerator {
 public:
  explicit ConditionGenerator(Rng* rng) : rng_(*rng) {}

  std::string Value(int depth = 0) {
    switch (rng_.Uniform(depth > 2 ? 3 : 6)) {
      case 0: return Attribute();
      case 1: return Number();
      case 2: return Attribute();
      case 3: return absl::StrCat("(", Value(depth + 1), " + ", Value(depth + 1), ")");
      case 4: return absl::StrCat("(", Value(depth + 1), " * ", Value(depth + 1), ")");
      default: return absl::StrCat("(", Value(depth + 1), " / ", Value(depth + 1), ")");
    }
  }

  std::string Attribute() { return std::string(1, "abc"[rng_.Uniform(3)]); }

  std::string Number() {
    static const char* const kNumbers[] = {"0", "1", "-1", "2", "2.5", "1.0", "-0.0", "3"};
    return kNumbers[rng_.Uniform(std::size(kNumbers))];
  }

  std::string Literal() {
    static const char* const kLiterals[] = {"'x'", "'y'", "1", "2.5", "TRUE"};
    return kLiterals[rng_.Uniform(std::size(kLiterals))];
  }

  std::string Comparison() {
    static const char* const kOps[] = {"=", "<>", "<", "<=", ">", ">="};
    const char* op = kOps[rng_.Uniform(std::size(kOps))];
    const bool equality = op[0] == '=' || op[1] == '>';
    if (equality && rng_.OneIn(2)) return absl::StrCat(Attribute(), " ", op, " ", Literal());
    return absl::StrCat(Value(), " ", op, " ", Value());
  }

  std::string Condition(int depth = 0) {
    switch (rng_.Uniform(depth > 2 ? 2 : 6)) {
      case 0: return Comparison();
      case 1: return absl::StrCat(Attribute(), rng_.OneIn(2) ? " IS NULL" : " IS NOT NULL");
      case 2: return absl::StrCat("NOT (", Condition(depth + 1), ")");
      case 3: return absl::StrCat("(", Condition(depth + 1), " AND ", Condition(depth + 1), ")");
      case 4: return absl::StrCat("(", Condition(depth + 1), " OR ", Condition(depth + 1), ")");
      default: return Attribute();  // a boolean attribute, or not
    }
  }

  Event RandomEvent() {
    Event e;
    for (const char* name : {"a", "b", "c"}) {
      switch (rng_.Uniform(8)) {
        case 0: break;  // missing
        case 1: e.SetInt64(name, static_cast<int64_t>(rng_.Uniform(5)) - 2); break;
        case 2: e.SetDouble(name, static_cast<double>(rng_.Uniform(7)) / 2 - 1); break;
        case 3: e.SetString(name, rng_.OneIn(2) ? "x" : "y"); break;
        case 4: e.SetBool(name, rng_.OneIn(2)); break;
        case 5: e.SetDouble(name, std::numeric_limits<double>::quiet_NaN()); break;
        case 6: e.SetInt64(name, rng_.OneIn(2) ? INT64_MAX : INT64_MIN); break;
        default: e.SetInt64(name, 1); break;
      }
    }
    return e;
  }

 private:
  Rng& rng_;
};

void RequireEquivalent(const std::string& left, const std::string& right,
                       const std::vector<Event>& events) {
  INFO(left << "  versus  " << right);
  Selector l = MustParse(left);
  Selector r = MustParse(right);
  for (const Event& e : events) {
    REQUIRE(l.Evaluate(e) == r.Evaluate(e));
  }
}

TEST_CASE("derived operators equal their definitions in three-valued logic", "[selector][random]") {
  for (uint64_t seed : Seeds(3000, 10)) {
    INFO("seed " << seed);
    Rng rng(seed);
    ConditionGenerator gen(&rng);
    for (int iter = 0; iter < 200; ++iter) {
      std::vector<Event> events;
      for (int k = 0; k < 8; ++k) events.push_back(gen.RandomEvent());
      const std::string v = gen.Value(), lo = gen.Value(), hi = gen.Value();
      RequireEquivalent(absl::StrCat(v, " BETWEEN ", lo, " AND ", hi),
                        absl::StrCat(v, " >= ", lo, " AND ", v, " <= ", hi), events);
      RequireEquivalent(absl::StrCat(v, " NOT BETWEEN ", lo, " AND ", hi),
                        absl::StrCat(v, " < ", lo, " OR ", v, " > ", hi), events);
      const std::string attr = gen.Attribute();
      const bool strings = rng.OneIn(2);
      const std::string x = strings ? "'x'" : gen.Number();
      const std::string y = strings ? "'y'" : gen.Number();
      RequireEquivalent(absl::StrCat(attr, " IN (", x, ", ", y, ")"),
                        absl::StrCat(attr, " = ", x, " OR ", attr, " = ", y), events);
      RequireEquivalent(absl::StrCat(attr, " NOT IN (", x, ", ", y, ")"),
                        absl::StrCat(attr, " <> ", x, " AND ", attr, " <> ", y), events);
      const std::string p = gen.Condition(), q = gen.Condition();
      RequireEquivalent(absl::StrCat("NOT (", p, " AND ", q, ")"),
                        absl::StrCat("NOT (", p, ") OR NOT (", q, ")"), events);
      RequireEquivalent(absl::StrCat("NOT (", p, " OR ", q, ")"),
                        absl::StrCat("NOT (", p, ") AND NOT (", q, ")"), events);
      RequireEquivalent(absl::StrCat(p, " AND ", q), absl::StrCat(q, " AND ", p), events);
      RequireEquivalent(absl::StrCat(p, " OR ", q), absl::StrCat(q, " OR ", p), events);
      RequireEquivalent(absl::StrCat("NOT NOT (", p, ")"), p, events);
    }
  }
}

}  // namespace
}  // namespace gryph
