#include "lib/selector/like_pattern.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/selector/utf8.h"

namespace gryph::selector_ast {

namespace {

constexpr size_t kNpos = absl::string_view::npos;

// The length of the sequence a lead byte announces (1 for any other byte), whether or not the
// bytes that follow complete it.
size_t NominalLength(uint8_t c) {
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

}  // namespace

absl::StatusOr<LikePattern> LikePattern::Compile(absl::string_view pattern,
                                                 absl::string_view escape) {
  if (!escape.empty() && Utf8CharLength(escape, 0) != escape.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ESCAPE needs exactly one character, not '", escape, "'"));
  }
  if (pattern.size() > kMaxPatternBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a LIKE pattern may have at most ", kMaxPatternBytes, " bytes"));
  }
  LikePattern p;
  std::vector<uint32_t> element_chars;  // beside elements_: characters a kLiteral matches
  auto add = [&](Element::Kind kind) {
    p.elements_.push_back(Element{kind, static_cast<uint32_t>(p.literals_.size()), 0, kNone});
    element_chars.push_back(0);
  };
  auto add_literal = [&](absl::string_view ch) {
    if (p.elements_.empty() || p.elements_.back().kind != Element::Kind::kLiteral) {
      add(Element::Kind::kLiteral);
    }
    p.literals_.append(ch.data(), ch.size());
    p.elements_.back().size += static_cast<uint32_t>(ch.size());
    ++element_chars.back();
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
      if (p.elements_.empty() || p.elements_.back().kind != Element::Kind::kAnyChars) {
        add(Element::Kind::kAnyChars);
      }
      ++p.elements_.back().size;
    } else if (ch == "%") {
      p.has_wildcards_ = true;
      if (p.elements_.empty() || p.elements_.back().kind != Element::Kind::kAnySequence) {
        const auto index = static_cast<uint32_t>(p.elements_.size());
        if (p.first_star_ == kNone) p.first_star_ = index;
        p.last_star_ = index;
        add(Element::Kind::kAnySequence);
      }
    } else {
      add_literal(ch);
    }
  }
  if (p.last_star_ == kNone) return p;
  for (size_t e = p.last_star_ + 1; e < p.elements_.size(); ++e) {
    const Element& el = p.elements_[e];
    p.suffix_chars_ += el.kind == Element::Kind::kLiteral ? element_chars[e] : el.size;
  }
  // Each segment between two `%`s is searched for by its first literal run: build its table.
  for (size_t e = p.first_star_ + 1; e < p.last_star_; ++e) {
    if (p.elements_[e - 1].kind == Element::Kind::kAnySequence ||
        (p.elements_[e - 1].kind == Element::Kind::kAnyChars &&
         p.elements_[e - 2].kind == Element::Kind::kAnySequence)) {
      Element& run = p.elements_[e];
      if (run.kind != Element::Kind::kLiteral) continue;
      run.table = static_cast<uint32_t>(p.tables_.size());
      const absl::string_view lit = p.LiteralOf(run);
      p.tables_.push_back(0);
      uint32_t k = 0;  // the longest proper border of lit[0, i)
      for (size_t i = 1; i < lit.size(); ++i) {
        while (k > 0 && lit[i] != lit[k]) k = p.tables_[run.table + k - 1];
        if (lit[i] == lit[k]) ++k;
        p.tables_.push_back(k);
      }
    }
  }
  return p;
}

absl::string_view LikePattern::literal_prefix() const {
  if (elements_.empty() || elements_.front().kind != Element::Kind::kLiteral) return {};
  return LiteralOf(elements_.front());
}

bool LikePattern::is_prefix() const {
  if (elements_.size() != 2 || elements_[0].kind != Element::Kind::kLiteral ||
      elements_[1].kind != Element::Kind::kAnySequence) {
    return false;
  }
  // A text starting with the literal's bytes matches unless a character of the literal that
  // starts in its last three bytes announces more bytes than the literal has left: the text may
  // then continue that character past the literal's end.
  const absl::string_view lit = LiteralOf(elements_[0]);
  for (size_t back = 1; back <= 3 && back <= lit.size(); ++back) {
    const auto c = static_cast<uint8_t>(lit[lit.size() - back]);
    if ((c & 0xC0) != 0x80) return NominalLength(c) <= back;
  }
  return true;
}

// Literal runs compare as bytes. That is the same as comparing characters when the run starts
// on a character boundary of the text (`pos` always is) and ends on one: the text then splits
// those bytes as the pattern split the run.
size_t LikePattern::MatchAt(size_t first, size_t last, absl::string_view text, size_t pos) const {
  for (size_t e = first; e < last; ++e) {
    const Element& el = elements_[e];
    if (el.kind == Element::Kind::kLiteral) {
      if (text.size() - pos < el.size ||
          std::memcmp(text.data() + pos, literals_.data() + el.begin, el.size) != 0) {
        return kNpos;
      }
      pos += el.size;
      if (!IsUtf8CharStart(text, pos)) return kNpos;
    } else {  // kAnyChars
      for (uint32_t c = 0; c < el.size; ++c) {
        if (pos == text.size()) return kNpos;
        pos += Utf8CharLength(text, pos);
      }
    }
  }
  return pos;
}

size_t LikePattern::Find(size_t first, size_t last, absl::string_view text, size_t pos) const {
  size_t e = first;
  if (elements_[e].kind == Element::Kind::kAnyChars) {
    // Leading `_`s: the segment's first literal run starts that many characters later.
    pos = MatchAt(e, e + 1, text, pos);
    if (pos == kNpos) return kNpos;
    ++e;
  }
  if (e == last) return pos;
  const Element& run = elements_[e];
  const char* const lit = literals_.data() + run.begin;
  const size_t m = run.size;
  const uint32_t* const border = tables_.data() + run.table;
  const char* const t = text.data();
  const size_t n = text.size();
  // Knuth-Morris-Pratt: j bytes of the run match the text before i. Every occurrence is seen in
  // order; the first one on character boundaries where the rest of the segment matches wins.
  size_t i = pos;
  size_t j = 0;
  while (true) {
    if (j == m) {
      if (IsUtf8CharStart(text, i - m) && IsUtf8CharStart(text, i)) {
        const size_t end = MatchAt(e + 1, last, text, i);
        if (end != kNpos) return end;
      }
      j = border[m - 1];
    }
    if (j == 0) {
      // Skip to the next byte that could start the run, leaving room for the rest of it.
      if (n - i < m) return kNpos;
      const void* hit = std::memchr(t + i, lit[0], n - i - m + 1);
      if (hit == nullptr) return kNpos;
      i = static_cast<size_t>(static_cast<const char*>(hit) - t) + 1;
      j = 1;
      continue;
    }
    if (n - i < m - j) return kNpos;
    if (t[i] == lit[j]) {
      ++i;
      ++j;
    } else {
      j = border[j - 1];
    }
  }
}

bool LikePattern::Matches(absl::string_view text) const {
  const size_t n = elements_.size();
  if (first_star_ == kNone) return MatchAt(0, n, text, 0) == text.size();
  size_t pos = MatchAt(0, first_star_, text, 0);
  if (pos == kNpos) return false;
  // The segments between two `%`s, each at its leftmost place after the one before.
  for (size_t begin = first_star_ + 1; begin < last_star_;) {
    size_t end = begin + 1;
    while (elements_[end].kind != Element::Kind::kAnySequence) ++end;
    pos = Find(begin, end, text, pos);
    if (pos == kNpos) return false;
    begin = end + 1;
  }
  // The segment after the last `%` ends the text: it starts suffix_chars_ characters before
  // the end, and no earlier than pos.
  size_t start = text.size();
  for (uint32_t c = 0; c < suffix_chars_; ++c) {
    if (start <= pos) return false;
    start = PreviousUtf8CharStart(text, start);
  }
  return MatchAt(last_star_ + 1, n, text, start) == text.size();
}

}  // namespace gryph::selector_ast
