#include "lib/selector/like_pattern.h"

#include "absl/strings/str_cat.h"
#include "lib/selector/utf8.h"

namespace gryph::selector_ast {

absl::StatusOr<LikePattern> LikePattern::Compile(absl::string_view pattern,
                                                 absl::string_view escape) {
  if (!escape.empty() && Utf8CharLength(escape, 0) != escape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ESCAPE needs exactly one character, not '", escape, "'"));
  }
  LikePattern p;
  auto add_literal = [&p](absl::string_view bytes) {
    if (p.elements_.empty() || p.elements_.back().kind != Element::Kind::kLiteral) {
      p.elements_.push_back(Element{Element::Kind::kLiteral, p.literals_.size(), 0});
    }
    p.literals_.append(bytes.data(), bytes.size());
    p.elements_.back().size += bytes.size();
  };
  size_t pos = 0;
  while (pos < pattern.size()) {
    const size_t len = Utf8CharLength(pattern, pos);
    const absl::string_view ch = pattern.substr(pos, len);
    pos += len;
    if (!escape.empty() && ch == escape) {
      if (pos == pattern.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("LIKE pattern ends with the escape character '", escape, "'"));
      }
      const absl::string_view next = pattern.substr(pos, Utf8CharLength(pattern, pos));
      if (next != "_" && next != "%" && next != escape) {
        return absl::InvalidArgumentError(
            absl::StrCat("in a LIKE pattern the escape character '", escape,
                         "' must be followed by '_', '%' or itself, not '", next, "'"));
      }
      add_literal(next);
      pos += next.size();
    } else if (ch == "_") {
      p.has_wildcards_ = true;
      p.elements_.push_back(Element{Element::Kind::kAnyChar});
    } else if (ch == "%") {
      p.has_wildcards_ = true;
      if (p.elements_.empty() || p.elements_.back().kind != Element::Kind::kAnySequence) {
        p.elements_.push_back(Element{Element::Kind::kAnySequence});
      }
    } else {
      add_literal(ch);
    }
  }
  return p;
}

absl::string_view LikePattern::literal_prefix() const {
  if (elements_.empty() || elements_.front().kind != Element::Kind::kLiteral) return {};
  return LiteralOf(elements_.front());
}

// Greedy matching with one backtracking point. When a `%` is met, the position after it is
// remembered; when a later element fails, the `%` absorbs one more character and matching
// resumes after it. Going back to an earlier `%` is never needed: anything an earlier `%` could
// absorb instead, the later one can absorb too, since the elements between them are fixed.
bool LikePattern::Matches(absl::string_view text) const {
  const size_t n = elements_.size();
  size_t e = 0;            // next element
  size_t t = 0;            // next text byte
  bool have_star = false;  // a `%` has been seen
  size_t star_e = 0;       // the element after the last `%` seen
  size_t star_t = 0;       // the text position that `%` has absorbed up to
  while (true) {
    bool ok = false;
    if (e < n) {
      const Element& el = elements_[e];
      switch (el.kind) {
        case Element::Kind::kAnySequence:
          if (e + 1 == n) return true;  // a trailing `%` absorbs the rest
          have_star = true;
          star_e = ++e;
          star_t = t;
          continue;
        case Element::Kind::kAnyChar:
          if (t < text.size()) {
            t += Utf8CharLength(text, t);
            ++e;
            ok = true;
          }
          break;
        case Element::Kind::kLiteral: {
          const absl::string_view lit = LiteralOf(el);
          if (text.substr(t).substr(0, lit.size()) == lit) {
            t += lit.size();
            ++e;
            ok = true;
          }
          break;
        }
      }
      if (ok) continue;
    } else if (t == text.size()) {
      return true;
    }
    // Mismatch, or pattern exhausted with text left: let the last `%` absorb one more character.
    if (!have_star || star_t >= text.size()) return false;
    star_t += Utf8CharLength(text, star_t);
    t = star_t;
    e = star_e;
  }
}

}  // namespace gryph::selector_ast
