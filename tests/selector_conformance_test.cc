// Conformance table for JMS 2.0 message selectors (JMS 2.0 §3.8.1.1), plus the choices gryph
// makes where the specification is silent (docs/selectors.md). Each row is a selector, an event
// and the expected three-valued result. Every row is also checked through NOT (which must give
// the three-valued negation), through Matches(), and through its DebugString() (which must parse
// to a selector giving the same result).

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gryph/event.h"
#include "gryph/selector.h"
#include "tests/test_util.h"

namespace gryph {
namespace {

constexpr Truth T = Truth::kTrue;
constexpr Truth F = Truth::kFalse;
constexpr Truth U = Truth::kUnknown;

const char* Name(Truth t) { return t == T ? "TRUE" : t == F ? "FALSE" : "UNKNOWN"; }

Truth Negation(Truth t) { return t == T ? F : t == F ? T : U; }

// Attributes for the per-row events. Overloads, so that a string literal never becomes a bool.
Attribute A(const char* name, const char* v) { return {name, std::string(v)}; }
Attribute A(const char* name, int v) { return {name, int64_t{v}}; }
Attribute A(const char* name, int64_t v) { return {name, v}; }
Attribute A(const char* name, double v) { return {name, v}; }
Attribute A(const char* name, bool v) { return {name, v}; }

// The event most rows run against. `x` and `y` are never set (NULL).
Event StandardEvent() {
  Event e;
  e.SetInt64("i", 5)
      .SetInt64("n", -3)
      .SetInt64("z", 0)
      .SetInt64("big", INT64_MAX)
      .SetInt64("small", INT64_MIN)
      .SetInt64("exact", 9007199254740993)  // 2^53 + 1, not representable as a double
      .SetDouble("d", 2.5)
      .SetDouble("one", 1.0)
      .SetDouble("dzero", 0.0)
      .SetDouble("nan", std::numeric_limits<double>::quiet_NaN())
      .SetDouble("inf", std::numeric_limits<double>::infinity())
      .SetString("s", "abc")
      .SetString("empty", "")
      .SetString("quote", "it's")
      .SetString("under", "a_b")
      .SetString("pct", "50%")
      .SetString("snum", "5")
      .SetString("u", "h\xC3\xA9llo")  // "héllo": é is one character of two bytes
      .SetString("Country", "UK")
      .SetBool("b", true)
      .SetBool("f", false);
  return e;
}

struct StandardRow {
  const char* selector;
  Truth expected;
};

// clang-format off
const StandardRow kStandardRows[] = {
    // Literals and identifiers as conditions.
    {"TRUE", T},
    {"FALSE", F},
    {"true", T},
    {"b", T},
    {"f", F},
    {"x", U},                 // a missing attribute is NULL
    {"i", U},                 // a non-boolean attribute used as a condition has no truth value
    {"s", U},
    {"NOT b", F},
    {"NOT x", U},
    {"NOT i", U},
    // Numeric comparison, exact and approximate.
    {"i = 5", T},
    {"i = 5.0", T},
    {"one = 1", T},
    {"1 = 1.0", T},
    {"i <> 5", F},
    {"i <> 6", T},
    {"i > 4", T},
    {"i >= 5", T},
    {"i < 5", F},
    {"i <= 5", T},
    {"i > 4.99", T},
    {"i < 5.01", T},
    {"d = 2.5", T},
    {"d > 2", T},
    {"d < 3", T},
    {"n = -3", T},
    {"n < -2.5", T},
    {"-n = 3", T},
    {"+i = 5", T},
    {"5 = i", T},
    {"exact = 9007199254740992.0", F},  // int64 against double by exact value, not by cast
    {"exact > 9007199254740992.0", T},
    {"exact = 9007199254740993", T},
    {"big = 9223372036854775807", T},
    {"big < 9223372036854775808.0", T},
    {"big = 9.223372036854775807E18", F},  // that literal is 2^63 as a double
    {"small = -9223372036854775808", T},
    {"small < -9223372036854775807", T},
    {"dzero = 0", T},
    {"dzero = -0.0", T},
    {"z = -0.0", T},
    // Unlike types never compare: FALSE, for <> too.
    {"s = 5", F},
    {"snum = 5", F},
    {"snum <> 5", F},
    {"i = '5'", F},
    {"b = 1", F},
    {"b = TRUE", T},
    {"b <> FALSE", T},
    {"f = FALSE", T},
    {"b = 'TRUE'", F},
    {"s > i", F},
    {"s < s", F},             // strings allow only = and <>; known only at run time here
    {"b > f", F},
    {"NOT (s = 5)", T},
    {"NOT (s > i)", T},
    // Strings.
    {"s = 'abc'", T},
    {"s = 'ABC'", F},
    {"s <> 'abd'", T},
    {"s = 'abc '", F},
    {"empty = ''", T},
    {"quote = 'it''s'", T},
    {"u = 'h\xC3\xA9llo'", T},
    {"s = s", T},
    // NULL.
    {"x = 5", U},
    {"x <> 5", U},
    {"x = x", U},
    {"5 = x", U},
    {"x > 1", U},
    {"x + 1 = 2", U},
    {"i + x = 2", U},
    {"x = 'abc'", U},
    {"x = TRUE", U},
    {"s = x", U},
    {"x IS NULL", T},
    {"x IS NOT NULL", F},
    {"i IS NULL", F},
    {"i IS NOT NULL", T},
    {"nan IS NULL", F},
    {"empty IS NULL", F},
    {"f IS NOT NULL", T},
    {"NOT (x IS NULL)", F},
    // Three-valued logic.
    {"x = 1 AND FALSE", F},
    {"FALSE AND x = 1", F},
    {"x = 1 AND TRUE", U},
    {"x = 1 OR TRUE", T},
    {"TRUE OR x = 1", T},
    {"x = 1 OR FALSE", U},
    {"x = 1 OR y = 1", U},
    {"x = 1 AND y = 1", U},
    {"NOT (x = 1)", U},
    {"NOT (x = 1 OR i = 5)", F},
    {"NOT (x = 1 AND i = 6)", T},
    {"x = 1 OR i = 5", T},
    {"x = 1 AND i = 5", U},
    {"NOT NOT (x = 1)", U},
    {"(i > 1) = TRUE", T},
    {"(x > 1) = TRUE", U},
    {"(i > 1) <> (i > 2)", F},
    // Precedence: NOT over AND over OR; comparisons bind tighter than all three.
    {"TRUE OR TRUE AND FALSE", T},
    {"FALSE AND TRUE OR TRUE", T},
    {"NOT FALSE AND FALSE", F},
    {"NOT TRUE OR TRUE", T},
    {"NOT i = 5", F},
    {"NOT i = 6 AND b", T},
    {"f OR NOT f AND b", T},
    {"(TRUE OR TRUE) AND FALSE", F},
    {"i = 5 OR x = 1 AND FALSE", T},
    {"x = 1 OR i = 5 AND b", T},
    // Keywords are case-insensitive.
    {"i = 5 and b", T},
    {"i Between 4 And 6", T},
    {"s iN ('abc')", T},
    {"s lIkE 'a%'", T},
    {"x iS nUlL", T},
    {"not f", T},
    {"FALSE oR TrUe", T},
    // Words that differ from a keyword only in a digit, '_' or '$' are identifiers.
    {"an_ IS NULL", T},
    {"AN$ IS NULL", T},
    {"nul1 IS NULL", T},
    {"betweeN_ IS NULL", T},
    {"O_ IS NULL AND i_ IS NULL", T},
    // Identifiers are case-sensitive.
    {"I = 5", U},
    {"S = 'abc'", U},
    {"country = 'UK'", U},
    {"Country = 'UK'", T},
    // Arithmetic and its precedence.
    {"i + 1 = 6", T},
    {"i - 1 = 4", T},
    {"i * 2 = 10", T},
    {"i / 2 = 2", T},         // int64 / int64 truncates, as in Java
    {"i / 2 = 2.5", F},
    {"i / 2.0 = 2.5", T},
    {"d * 2 = 5", T},
    {"1 + 2 * 3 = 7", T},
    {"(1 + 2) * 3 = 9", T},
    {"10 - 4 - 3 = 3", T},
    {"100 / 10 / 5 = 2", T},
    {"-i * 2 = -10", T},
    {"- -i = 5", T},
    {"2 * -i = -10", T},
    {"n / 2 = -1", T},        // truncation toward zero
    {"n / 2 = -2", F},
    {"7 / -2 = -3", T},
    {"i - 2 * 3 = -1", T},
    {"i + d = 7.5", T},
    {"i * d = 12.5", T},
    // Division by zero is NULL.
    {"i / 0 = 1", U},
    {"i / z = 1", U},
    {"NOT (i / 0 = 1)", U},
    {"d / 0 > 1", U},
    {"d / 0.0 > 1", U},
    {"i / dzero > 0", U},
    {"z / 5 = 0", T},
    {"i / 0 = 1 OR TRUE", T},
    // int64 overflow gives the double result.
    {"big + 1 > big", T},
    {"big + 1 = 9223372036854775808.0", T},
    {"big * 2 > 0", T},
    {"small - 1 = small", T},  // the double nearest -2^63 - 1 is -2^63
    {"small * 2 < small", T},
    {"-small > 0", T},
    {"small / -1 > 0", T},
    {"big + 1 - 1 = big", F},  // (2^63 as a double) - 1 is still 2^63
    {"big - 1 = 9223372036854775806", T},
    {"small + big = -1", T},
    // Arithmetic on strings or booleans: the comparison is FALSE; NULL still wins.
    {"s + 1 = 1", F},
    {"NOT (s + 1 = 1)", T},
    {"b * 2 = 2", F},
    {"s + x = 1", U},
    {"-s = 1", F},
    {"+s = 'abc'", F},
    // NaN compares as UNKNOWN; infinities are ordinary numbers.
    {"nan = nan", U},
    {"nan <> 1", U},
    {"nan > 0", U},
    {"nan IN (1, 2)", U},
    {"nan BETWEEN 0 AND 1", U},
    {"nan NOT BETWEEN 0 AND 1", U},
    {"NOT (nan = 1)", U},
    {"inf - inf = 0", U},
    {"inf * 0 = 0", U},
    {"inf > big", T},
    {"-inf < small", T},
    {"inf = inf", T},
    // BETWEEN is v >= lo AND v <= hi; NOT BETWEEN is v < lo OR v > hi.
    {"i BETWEEN 5 AND 6", T},
    {"i BETWEEN 1 AND 5", T},
    {"i BETWEEN 6 AND 10", F},
    {"i BETWEEN 10 AND 1", F},
    {"i NOT BETWEEN 6 AND 10", T},
    {"i NOT BETWEEN 5 AND 6", F},
    {"d BETWEEN 2 AND 3", T},
    {"i BETWEEN 4.5 AND 5.5", T},
    {"x BETWEEN 1 AND 2", U},
    {"x NOT BETWEEN 1 AND 2", U},
    {"i BETWEEN x AND 10", U},
    {"i BETWEEN x AND 3", F},
    {"i NOT BETWEEN x AND 3", T},
    {"i NOT BETWEEN x AND 10", U},
    {"s BETWEEN 1 AND 10", F},
    {"s NOT BETWEEN 1 AND 10", F},
    {"i BETWEEN n AND i + 1", T},
    {"i + 1 BETWEEN 5 AND 6", T},
    {"i BETWEEN 1 AND 10 AND b", T},
    {"NOT i BETWEEN 1 AND 10", F},
    // IN.
    {"Country IN ('UK', 'US', 'France')", T},
    {"Country IN ('US', 'France')", F},
    {"Country NOT IN ('UK', 'US', 'France')", F},
    {"Country NOT IN ('US', 'France')", T},
    {"x IN ('UK')", U},
    {"x NOT IN ('UK')", U},
    {"NOT (x IN ('UK'))", U},
    {"i IN ('5')", F},        // not a string: FALSE ...
    {"i NOT IN ('5')", F},    // ... for NOT IN as well, as for a mismatched <>
    {"NOT (i IN ('5'))", T},
    {"snum IN (5)", F},
    {"i IN (1, 5, 9)", T},    // numeric IN, an extension
    {"i IN (5.0)", T},
    {"one IN (1)", T},
    {"d IN (2, 3)", F},
    {"d IN (2.5)", T},
    {"i NOT IN (1, 2)", T},
    {"n IN (-3, 3)", T},
    {"big IN (9223372036854775807)", T},
    {"small IN (-9223372036854775808)", T},
    {"exact IN (9007199254740992.0)", F},
    {"b IN ('TRUE')", F},
    {"s IN ('ABC', 'abc ')", F},
    {"quote IN ('it''s')", T},
    {"empty IN ('')", T},
    // LIKE.
    {"s LIKE 'abc'", T},
    {"s LIKE 'a%'", T},
    {"s LIKE '%c'", T},
    {"s LIKE '%b%'", T},
    {"s LIKE 'a_c'", T},
    {"s LIKE '___'", T},
    {"s LIKE '__'", F},
    {"s LIKE '____'", F},
    {"s LIKE '%'", T},
    {"empty LIKE '%'", T},
    {"empty LIKE '_'", F},
    {"s LIKE 'A%'", F},
    {"s NOT LIKE 'a%'", F},
    {"s NOT LIKE 'b%'", T},
    {"x LIKE 'a%'", U},
    {"x NOT LIKE 'a%'", U},
    {"i LIKE '5'", F},
    {"i NOT LIKE '5'", F},
    {"under LIKE 'a\\_b' ESCAPE '\\'", T},
    {"s LIKE 'a\\_c' ESCAPE '\\'", F},
    {"under LIKE 'a\\_%' ESCAPE '\\'", T},
    {"pct LIKE '50\\%' ESCAPE '\\'", T},
    {"pct LIKE '5\\%' ESCAPE '\\'", F},
    {"s LIKE '%\\%' ESCAPE '\\'", F},
    {"under LIKE 'a!_b' ESCAPE '!'", T},
    {"s LIKE 'a\\\\c' ESCAPE '\\'", F},
    {"s LIKE 'a%%c'", T},
    {"s LIKE '%_%'", T},
    {"s LIKE '_%_'", T},
    {"s LIKE '%_'", T},
    {"s LIKE 'ab_%'", T},
    {"s LIKE 'abc_%'", F},
    {"s LIKE 'abc%'", T},
    {"s LIKE '%abc%'", T},
    {"under LIKE '%\\__' ESCAPE '\\'", T},
    {"u LIKE 'h_llo'", T},    // _ is one character, not one byte
    {"u LIKE 'h__llo'", F},
    {"quote LIKE 'it''_'", T},
    // Literal syntax (Java's).
    {"i + 52L = 57", T},
    {"0x5 = i", T},
    {"0X1f = 31", T},
    {"05 = i", T},
    {"017 = 15", T},
    {"7. = 7", T},
    {".5 + .5 = 1", T},
    {"7E3 = 7000", T},
    {"-57.9E2 = -5790", T},
    {"+62 = 62", T},
    {"7d = 7", T},
    {"2.5f = d", T},
    {"0xFFFFFFFFFFFFFFFFL = -1", T},
    {"4.9e-324 > 0", T},      // a subnormal literal
    {"1.7976931348623157e308 > 1e308", T},
    // Whitespace.
    {"i = 5\nAND b", T},
    {"\ti\t=\t5\r\n", T},
    {"  ", T},                // empty selector: matches everything
};
// clang-format on

struct EventRow {
  const char* selector;
  std::vector<Attribute> attributes;
  Truth expected;
};

const EventRow kEventRows[] = {
    // The examples of JMS 2.0 §3.8.1.1.
    {"phone LIKE '12%3'", {A("phone", "123")}, T},
    {"phone LIKE '12%3'", {A("phone", "12993")}, T},
    {"phone LIKE '12%3'", {A("phone", "1234")}, F},
    {"word LIKE 'l_se'", {A("word", "lose")}, T},
    {"word LIKE 'l_se'", {A("word", "loose")}, F},
    {"underscored LIKE '\\_%' ESCAPE '\\'", {A("underscored", "_foo")}, T},
    {"underscored LIKE '\\_%' ESCAPE '\\'", {A("underscored", "bar")}, F},
    {"phone NOT LIKE '12%3'", {A("phone", "123")}, F},
    {"phone NOT LIKE '12%3'", {A("phone", "12993")}, F},
    {"phone NOT LIKE '12%3'", {A("phone", "1234")}, T},
    {"Country IN ('UK', 'US', 'France')", {A("Country", "Peru")}, F},
    {"Country NOT IN ('UK', 'US', 'France')", {A("Country", "Peru")}, T},
    {"age BETWEEN 15 AND 19", {A("age", 15)}, T},
    {"age BETWEEN 15 AND 19", {A("age", 19)}, T},
    {"age BETWEEN 15 AND 19", {A("age", 14)}, F},
    {"age BETWEEN 15 AND 19", {A("age", 20)}, F},
    {"age NOT BETWEEN 15 AND 19", {A("age", 14)}, T},
    {"age NOT BETWEEN 15 AND 19", {A("age", 17)}, F},
    {"NumberOfOrders > 1", {A("NumberOfOrders", "2")}, F},  // a string is not a number
    {"JMSType = 'car' AND color = 'blue' AND weight > 2500",
     {A("JMSType", "car"), A("color", "blue"), A("weight", 3000)},
     T},
    // An event without attributes: everything is NULL.
    {"a IS NULL", {}, T},
    {"a IS NOT NULL", {}, F},
    {"a = 1", {}, U},
    {"a = 1 OR a IS NULL", {}, T},
    {"NOT (a IN ('x'))", {}, U},
    // Attribute against attribute.
    {"a = b", {A("a", 1), A("b", 1.0)}, T},
    {"a < b", {A("a", 1), A("b", 1.5)}, T},
    {"a = b", {A("a", "x"), A("b", "x")}, T},
    {"a <> b", {A("a", "x"), A("b", "y")}, T},
    {"a < b", {A("a", "x"), A("b", "y")}, F},
    {"a = b", {A("a", true), A("b", true)}, T},
    {"a = b", {A("a", 1), A("b", "1")}, F},
    {"a <> b", {A("a", 1), A("b", "1")}, F},
    {"a = b", {A("a", 1), A("b", true)}, F},
    // LIKE corner cases.
    {"a LIKE '%%' ESCAPE '%'", {A("a", "%")}, T},  // the escape character may be a wildcard
    {"a LIKE '%%' ESCAPE '%'", {A("a", "x")}, F},
    {"a LIKE 'a.c'", {A("a", "a.c")}, T},  // no regular expressions
    {"a LIKE 'a.c'", {A("a", "abc")}, F},
    {"a LIKE '[ab]'", {A("a", "a")}, F},
    {"a LIKE '%a%a%a%b'", {A("a", "aaaaaaaaaaaaaaaaaaaaaaaaab")}, T},
    {"a LIKE '%a%a%a%c'", {A("a", "aaaaaaaaaaaaaaaaaaaaaaaaab")}, F},
    {"a LIKE '%ab%ab%'", {A("a", "xxabyyab")}, T},
    {"a LIKE '%ab%ab'", {A("a", "abab")}, T},
    {"a LIKE '%ab%ab'", {A("a", "aba")}, F},
    {"a LIKE '_'", {A("a", "\xE6\x97\xA5")}, T},  // one three-byte character
    {"a LIKE '_'", {A("a", "\xFF")}, T},          // an invalid byte is one character
    {"a LIKE '__'", {A("a", "\xE6\x97")}, T},     // a truncated sequence is two
    // Booleans.
    {"flag", {A("flag", true)}, T},
    {"flag AND n > 1", {A("flag", true), A("n", 2)}, T},
    {"NOT flag", {A("flag", false)}, T},
    {"flag", {A("flag", "true")}, U},
    {"flag = TRUE", {A("flag", "true")}, F},
    // Numeric IN with an attribute of the other numeric type.
    {"a IN (1, 2.5)", {A("a", 2.5)}, T},
    {"a IN (1, 2.5)", {A("a", 1.0)}, T},
    {"a IN (1.0, 2.5)", {A("a", 1)}, T},
    {"a IN (1.5, 2.5)", {A("a", 1)}, F},
    {"a IN (9007199254740992.0)", {A("a", int64_t{9007199254740993})}, F},
    {"a IN (9007199254740992.0)", {A("a", int64_t{9007199254740992})}, T},
    {"a NOT IN (1, 2)", {A("a", 3.5)}, T},
};

void CheckRow(const std::string& text, const Event& event, Truth expected) {
  INFO("selector: " << text);
  auto selector = Selector::Parse(text);
  REQUIRE_OK(selector);
  INFO("understood as: " << selector->DebugString());
  INFO("expected " << Name(expected) << ", got " << Name(selector->Evaluate(event)));
  REQUIRE(selector->Evaluate(event) == expected);
  REQUIRE(selector->Matches(event) == (expected == T));

  if (!selector->matches_everything()) {
    auto negated = Selector::Parse("NOT (" + text + ")");
    REQUIRE_OK(negated);
    REQUIRE(negated->Evaluate(event) == Negation(expected));
  }

  auto reparsed = Selector::Parse(selector->DebugString());
  REQUIRE_OK(reparsed);
  REQUIRE(reparsed->DebugString() == selector->DebugString());
  REQUIRE(reparsed->Evaluate(event) == expected);
}

TEST_CASE("the conformance table holds against the standard event", "[selector][conformance]") {
  const Event event = StandardEvent();
  for (const StandardRow& row : kStandardRows) CheckRow(row.selector, event, row.expected);
}

TEST_CASE("the conformance table holds against per-row events", "[selector][conformance]") {
  for (const EventRow& row : kEventRows) {
    Event event;
    for (const Attribute& a : row.attributes) event.Set(a.name, a.value);
    CheckRow(row.selector, event, row.expected);
  }
}

TEST_CASE("a multi-byte character can be the escape character", "[selector][conformance]") {
  Event e;
  e.SetString("a", "50%");
  CheckRow("a LIKE '50\xC3\xA9%' ESCAPE '\xC3\xA9'", e, T);
  e.SetString("a", "50x");
  CheckRow("a LIKE '50\xC3\xA9%' ESCAPE '\xC3\xA9'", e, F);
}

TEST_CASE("the conformance table has at least 150 rows", "[selector][conformance]") {
  REQUIRE(std::size(kStandardRows) + std::size(kEventRows) >= 150);
}

}  // namespace
}  // namespace gryph
