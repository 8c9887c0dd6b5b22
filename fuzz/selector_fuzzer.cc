// libFuzzer target for the selector language, topic filters and subscription decoding.
//
// Each input is tried as a selector, as a topic filter and as an encoded subscription. Beyond
// "no crash, no sanitizer report", it checks the invariants the rest of gryph relies on:
//   - a rejected input fails with InvalidArgument and a positioned message, and one longer than
//     the length limit fails with a message naming the limit;
//   - a parsed selector's DebugString parses to the same tree and evaluates the same;
//   - NOT (selector) evaluates to the three-valued negation;
//   - every conjunct AsIndexable() describes is TRUE exactly when its index condition holds;
//   - a decoded subscription re-encodes to the same bytes;
//   - a parsed selector's encoding decodes to the same text, rendering and truth values, and any
//     input Selector::Decode accepts re-encodes to itself; anything else it refuses with
//     DataLoss or InvalidArgument; the same holds of a program stored beside its text
//     (EncodeProgram / DecodeProgram);
//   - any input taken as a compiled program (past the encoding's checksum) is refused with
//     DataLoss or evaluates and renders without fault, a FALSE conjunct making it FALSE.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gryph/event.h"
#include "gryph/selector.h"
#include "gryph/subscription.h"
#include "gryph/topic_filter.h"
#include "lib/selector/numeric.h"
#include "lib/selector/program.h"

namespace {

using gryph::AttributeValue;
using gryph::Event;
using gryph::Selector;
using gryph::Truth;
namespace ast = gryph::selector_ast;
namespace sp = gryph::selector_program;

[[noreturn]] void Fail(const char* what, absl::string_view detail) {
  std::fprintf(stderr, "invariant broken: %s: %.*s\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

void Check(bool ok, const char* what, absl::string_view detail) {
  if (!ok) Fail(what, detail);
}

const std::vector<Event>& Events() {
  static const std::vector<Event>* events = [] {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    auto* v = new std::vector<Event>(5);
    (*v)[0]
        .SetInt64("a", 1)
        .SetInt64("b", 2)
        .SetDouble("c", 2.5)
        .SetString("s", "abc")
        .SetBool("flag", true)
        .SetInt64("i", 0)
        .SetDouble("d", -0.0)
        .SetString("x", "a_b%c")
        .SetInt64("price", 150)
        .SetInt64("qty", 10)
        .SetString("symbol", "IBM")
        .SetString("region", "us")
        .SetString("name", "a_x");
    (*v)[1]
        .SetDouble("a", nan)
        .SetString("b", "2")
        .SetInt64("c", INT64_MIN)
        .SetInt64("s", INT64_MAX)
        .SetBool("flag", false)
        .SetDouble("i", inf)
        .SetDouble("price", 99.5)
        .SetString("symbol", "h\xC3\xA9llo")
        .SetString("name", "");
    (*v)[2]
        .SetBool("a", true)
        .SetDouble("b", 9007199254740992.0)
        .SetInt64("c", 9007199254740993)
        .SetString("s", "\xFF\xC3")
        .SetDouble("d", -inf)
        .SetInt64("qty", -3)
        .SetString("region", "eu");
    // (*v)[3] has no attributes: everything is NULL.
    (*v)[4].SetString("a", "%").SetString("b", "_").SetString("s", "it's").SetInt64("i", -1);
    for (Event& e : *v) e.SetTopic("orders/us/IBM");
    return v;
  }();
  return *events;
}

Truth Negation(Truth t) {
  return t == Truth::kTrue ? Truth::kFalse : t == Truth::kFalse ? Truth::kTrue : Truth::kUnknown;
}

// -1/0/1 comparing two numeric values exactly; nullopt when either is not a number or is NaN.
std::optional<int> CompareNumbers(const AttributeValue& a, const AttributeValue& b) {
  auto number = [](const AttributeValue& v, int64_t* i, double* d) {
    if (const auto* p = std::get_if<int64_t>(&v)) return *i = *p, 1;
    if (const auto* p = std::get_if<double>(&v)) return std::isnan(*p) ? 0 : (*d = *p, 2);
    return 0;
  };
  int64_t ai = 0, bi = 0;
  double ad = 0, bd = 0;
  const int ka = number(a, &ai, &ad), kb = number(b, &bi, &bd);
  if (ka == 0 || kb == 0) return std::nullopt;
  if (ka == 1 && kb == 1) return ast::CompareInt64(ai, bi);
  if (ka == 2 && kb == 2) return ast::CompareDouble(ad, bd);
  if (ka == 1) return ast::CompareInt64Double(ai, bd);
  return -ast::CompareInt64Double(bi, ad);
}

// Whether `v` equals literal `lit` by the selector's typing rules.
bool IndexEqual(const AttributeValue& v, const AttributeValue& lit) {
  if (std::holds_alternative<std::string>(lit) || std::holds_alternative<bool>(lit)) {
    return v == lit;
  }
  std::optional<int> cmp = CompareNumbers(v, lit);
  return cmp.has_value() && *cmp == 0;
}

// What an index built from `ix` would say about `event`.
bool IndexMatches(const sp::IndexableConjunct& ix, const Event& event) {
  const AttributeValue* v = event.Find(ix.attribute);
  if (v == nullptr) return false;
  switch (ix.kind) {
    case sp::IndexableConjunct::Kind::kEqual:
    case sp::IndexableConjunct::Kind::kIn:
      for (const sp::Literal& lit : ix.values) {
        if (IndexEqual(*v, lit.ToValue())) return true;
      }
      return false;
    case sp::IndexableConjunct::Kind::kRange: {
      if (ix.lower != nullptr) {
        std::optional<int> cmp = CompareNumbers(*v, ix.lower->ToValue());
        if (!cmp || *cmp < 0 || (*cmp == 0 && !ix.lower_inclusive)) return false;
      }
      if (ix.upper != nullptr) {
        std::optional<int> cmp = CompareNumbers(*v, ix.upper->ToValue());
        if (!cmp || *cmp > 0 || (*cmp == 0 && !ix.upper_inclusive)) return false;
      }
      return CompareNumbers(*v, *v).has_value();  // numeric and not NaN
    }
  }
  return false;
}

void FuzzSelector(absl::string_view input) {
  absl::StatusOr<Selector> s = Selector::Parse(input);
  if (!s.ok()) {
    Check(s.status().code() == absl::StatusCode::kInvalidArgument, "error code",
          s.status().ToString());
    Check(absl::StartsWith(s.status().message(), "selector:"), "error message",
          s.status().message());
    return;
  }
  Check(s->text() == input, "text kept", input);
  // One byte less of length limit refuses it, naming the limit.
  if (!input.empty()) {
    gryph::SelectorOptions shorter;
    shorter.max_length = input.size() - 1;
    absl::StatusOr<Selector> refused = Selector::Parse(input, shorter);
    Check(!refused.ok() && absl::StrContains(refused.status().message(), "max_length"),
          "length limit", refused.status().ToString());
  }
  // The rendering adds parentheses, which may take it over the length limit: none for it.
  gryph::SelectorOptions unlimited;
  unlimited.max_length = SIZE_MAX;
  const std::string debug = s->DebugString();
  absl::StatusOr<Selector> again = Selector::Parse(debug, unlimited);
  if (!again.ok()) {
    Check(absl::StrContains(again.status().message(), "nested too deeply"), "DebugString parses",
          again.status().ToString() + " for " + debug);
  } else {
    Check(again->DebugString() == debug, "DebugString is a fixpoint", debug);
  }
  absl::StatusOr<Selector> negated =
      Selector::Parse("NOT (" + std::string(input) + "\n)", unlimited);
  for (const Event& e : Events()) {
    const Truth t = s->Evaluate(e);
    Check(s->Matches(e) == (t == Truth::kTrue), "Matches", debug);
    if (again.ok()) Check(again->Evaluate(e) == t, "DebugString evaluates the same", debug);
    if (negated.ok() && !s->matches_everything()) {
      Check(negated->Evaluate(e) == Negation(t), "NOT negates", debug);
    }
  }
  // The encoding decodes to the same selector.
  const std::string encoded = s->Encode();
  absl::StatusOr<Selector> decoded = Selector::Decode(encoded);
  Check(decoded.ok(), "an encoding decodes", decoded.status().ToString());
  Check(decoded->Encode() == encoded && decoded->text() == s->text() &&
            decoded->DebugString() == debug,
        "decoding round trip", debug);
  for (const Event& e : Events()) {
    Check(decoded->Evaluate(e) == s->Evaluate(e), "decoded evaluates the same", debug);
  }
  // So does the program stored beside the text.
  absl::StatusOr<Selector> from_program = Selector::DecodeProgram(s->text(), s->EncodeProgram());
  Check(from_program.ok(), "a stored program decodes", from_program.status().ToString());
  Check(from_program->Encode() == encoded, "program round trip", debug);
  if (s->matches_everything()) return;
  const sp::View view(*s->program());
  for (const sp::ViewNode* conjunct : view.Conjuncts(view.root())) {
    std::optional<sp::IndexableConjunct> ix = sp::AsIndexable(view, *conjunct);
    if (!ix.has_value()) continue;
    for (const Event& e : Events()) {
      const bool is_true =
          s->program()->EvaluateRange(conjunct->begin, conjunct->end, e) == Truth::kTrue;
      Check(is_true == IndexMatches(*ix, e), "indexable conjunct", view.ToString(*conjunct));
    }
  }
}

// `input` as the stored program of a text: refused with DataLoss or InvalidArgument, or accepted
// as a selector whose stored program is `input` again.
void FuzzSelectorDecodeProgram(absl::string_view input) {
  for (absl::string_view text : {"", "a = 1"}) {
    absl::StatusOr<Selector> s = Selector::DecodeProgram(text, input);
    if (!s.ok()) {
      Check(s.status().code() == absl::StatusCode::kDataLoss ||
                s.status().code() == absl::StatusCode::kInvalidArgument,
            "selector program decode error code", s.status().ToString());
      continue;
    }
    Check(s->EncodeProgram() == input && s->text() == text, "program re-encoding", input);
  }
}

// `input` as an encoded selector: refused with DataLoss or InvalidArgument, or accepted as a
// selector that encodes to `input` again and evaluates without fault.
void FuzzSelectorDecode(absl::string_view input) {
  absl::StatusOr<Selector> s = Selector::Decode(input);
  if (!s.ok()) {
    Check(s.status().code() == absl::StatusCode::kDataLoss ||
              s.status().code() == absl::StatusCode::kInvalidArgument,
          "selector decode error code", s.status().ToString());
    return;
  }
  Check(s->Encode() == input, "selector re-encoding", input);
  // Its program, stored beside its text, decodes to the same selector.
  absl::StatusOr<Selector> from_program = Selector::DecodeProgram(s->text(), s->EncodeProgram());
  Check(from_program.ok() && from_program->Encode() == input, "program re-encoding", input);
  const std::string debug = s->DebugString();
  for (const Event& e : Events()) {
    const Truth t = s->Evaluate(e);
    Check(s->Matches(e) == (t == Truth::kTrue), "decoded Matches", debug);
  }
}

void FuzzTopicFilter(absl::string_view input) {
  absl::StatusOr<gryph::TopicFilter> f = gryph::TopicFilter::Parse(input);
  if (!f.ok()) {
    Check(f.status().code() == absl::StatusCode::kInvalidArgument, "topic filter error code",
          f.status().ToString());
    return;
  }
  Check(absl::StrJoin(f->levels(), "/") == input, "levels rebuild the filter", input);
  Check(f->Matches(input) || f->has_wildcards(), "a plain filter matches itself", input);
  for (absl::string_view topic : {"", "a", "a/b", "orders/us/IBM", "/", "a//b"}) {
    (void)f->Matches(topic);
  }
}

void FuzzSubscription(absl::string_view input) {
  absl::StatusOr<gryph::Subscription> sub = gryph::Subscription::Decode(input);
  if (!sub.ok()) {
    Check(sub.status().code() == absl::StatusCode::kInvalidArgument, "decode error code",
          sub.status().ToString());
    return;
  }
  Check(sub->Encode() == input, "re-encoding", input);
  for (const Event& e : Events()) (void)sub->Matches(e);
}

// `input` as a compiled program, past the encoding's checksum (which random bytes never pass):
// refused with DataLoss, or a program that evaluates, renders and splits into conjuncts without
// fault.
void FuzzProgram(absl::string_view input) {
  absl::StatusOr<sp::ProgramRef> p = sp::Program::Make(input);
  if (!p.ok()) {
    Check(p.status().code() == absl::StatusCode::kDataLoss, "program error code",
          p.status().ToString());
    return;
  }
  Check((*p)->code() == input, "program bytes kept", input);
  const sp::View view(**p);
  const std::string debug = view.ToString(*view.root());
  for (const Event& e : Events()) {
    const Truth t = (*p)->Evaluate(e);
    for (const sp::ViewNode* conjunct : view.Conjuncts(view.root())) {
      const Truth c = (*p)->EvaluateRange(conjunct->begin, conjunct->end, e);
      if (c == Truth::kFalse) Check(t == Truth::kFalse, "a FALSE conjunct", debug);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  FuzzSelector(input);
  FuzzTopicFilter(input);
  FuzzSubscription(input);
  FuzzSelectorDecode(input);
  FuzzSelectorDecodeProgram(input);
  FuzzProgram(input);
  return 0;
}
