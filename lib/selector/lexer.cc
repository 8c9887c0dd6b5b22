#include "lib/selector/lexer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/charconv.h"
#include "absl/strings/str_cat.h"
#include "lib/selector/utf8.h"

namespace gryph::selector_ast {

namespace {

constexpr size_t kLongestKeyword = 7;  // BETWEEN

// The bytes of a word of at most 8 bytes, each with bit 0x20 set: ASCII letters in lower case.
// Case-insensitive equality with a keyword (all letters) is equality of the folded words, as no
// other byte an identifier may hold (digits, '_', '$', bytes >= 0x80) folds to a letter.
constexpr uint64_t Folded(absl::string_view word) {
  uint64_t v = 0;
  for (size_t i = 0; i < word.size(); ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(word[i]) | 0x20) << (8 * i);
  }
  return v;
}

struct Keyword {
  constexpr Keyword(absl::string_view w, TokenKind k)
      : size(w.size()), folded(Folded(w)), kind(k) {}
  size_t size;
  uint64_t folded;
  TokenKind kind;
};
constexpr Keyword kKeywords[] = {
    {"NULL", TokenKind::kNull},       {"TRUE", TokenKind::kTrue},     {"FALSE", TokenKind::kFalse},
    {"NOT", TokenKind::kNot},         {"AND", TokenKind::kAnd},       {"OR", TokenKind::kOr},
    {"BETWEEN", TokenKind::kBetween}, {"LIKE", TokenKind::kLike},     {"IN", TokenKind::kIn},
    {"IS", TokenKind::kIs},           {"ESCAPE", TokenKind::kEscape},
};

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAsciiIdentifierStart(char c) { return absl::ascii_isalpha(c) || c == '_' || c == '$'; }
bool IsAsciiIdentifierPart(char c) { return IsAsciiIdentifierStart(c) || IsDigit(c); }

// Escapes `bytes` for a message: control characters and invalid UTF-8 become \xNN.
std::string Printable(absl::string_view bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const size_t len = Utf8CharLength(bytes, i);
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (len > 1 || (c >= 0x20 && c < 0x7F)) {
      out.append(bytes.data() + i, len);
    } else {
      absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
    }
    i += len;
  }
  return out;
}

// Reads one token from a position of the text.
class Scanner {
 public:
  Scanner(absl::string_view text, size_t pos, std::forward_list<std::string>* unescaped)
      : text_(text), pos_(pos), unescaped_(unescaped) {}

  // The token at the position, after whitespace (kEnd at the end of the text).
  absl::Status Scan(Token* token) {
    while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
    *token = Token();
    token->offset = pos_;
    if (pos_ == text_.size()) return absl::OkStatus();
    absl::Status s = Next(token);
    token->length = pos_ - token->offset;
    return s;
  }

  size_t pos() const { return pos_; }

 private:
  char Peek(size_t ahead = 0) const {
    return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0';
  }

  absl::Status Next(Token* token) {
    const char c = text_[pos_];
    if (c == '\'') return String(token);
    if (IsDigit(c) || (c == '.' && IsDigit(Peek(1)))) return Number(token);
    if (IsAsciiIdentifierStart(c) || static_cast<unsigned char>(c) >= 0x80) {
      return Word(token);
    }
    auto op = [&](TokenKind kind, size_t len) {
      token->kind = kind;
      pos_ += len;
      return absl::OkStatus();
    };
    switch (c) {
      case '(': return op(TokenKind::kLeftParen, 1);
      case ')': return op(TokenKind::kRightParen, 1);
      case ',': return op(TokenKind::kComma, 1);
      case '+': return op(TokenKind::kPlus, 1);
      case '-': return op(TokenKind::kMinus, 1);
      case '*': return op(TokenKind::kStar, 1);
      case '/': return op(TokenKind::kSlash, 1);
      case '=': return op(TokenKind::kEqual, 1);
      case '<':
        if (Peek(1) == '>') return op(TokenKind::kNotEqual, 2);
        if (Peek(1) == '=') return op(TokenKind::kLessEqual, 2);
        return op(TokenKind::kLess, 1);
      case '>':
        if (Peek(1) == '=') return op(TokenKind::kGreaterEqual, 2);
        return op(TokenKind::kGreater, 1);
      case '!':
        if (Peek(1) == '=') return Error(pos_, "unexpected '!=': write <> for 'not equal'");
        break;
      case '"': return Error(pos_, "unexpected '\"': string literals use single quotes");
      default: break;
    }
    return Error(pos_,
                 absl::StrCat("unexpected character '", Printable(text_.substr(pos_, 1)), "'"));
  }

  absl::Status String(Token* token) {
    const size_t start = pos_++;
    token->kind = TokenKind::kString;
    const size_t first = pos_;
    std::string* copy = nullptr;
    while (true) {
      const size_t quote = text_.find('\'', pos_);
      if (quote == absl::string_view::npos) {
        return Error(start, "unterminated string literal");
      }
      if (copy != nullptr) copy->append(text_.data() + pos_, quote - pos_);
      pos_ = quote + 1;
      if (Peek() != '\'') {
        token->view =
            copy != nullptr ? absl::string_view(*copy) : text_.substr(first, quote - first);
        return absl::OkStatus();
      }
      // '' stands for one quote: from here on the value is a copy.
      if (copy == nullptr) {
        copy = &unescaped_->emplace_front(text_.data() + first, quote - first);
      }
      copy->push_back('\'');
      ++pos_;
    }
  }

  // An identifier or keyword.
  absl::Status Word(Token* token) {
    const size_t start = pos_;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (IsAsciiIdentifierPart(c)) {
        ++pos_;
      } else if (static_cast<unsigned char>(c) >= 0x80) {
        const size_t len = Utf8CharLength(text_, pos_);
        if (len == 1) {
          return Error(pos_,
                       absl::StrCat("invalid UTF-8 byte 0x",
                                    absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2)));
        }
        pos_ += len;
      } else {
        break;
      }
    }
    const absl::string_view word = text_.substr(start, pos_ - start);
    if (word.size() <= kLongestKeyword) {
      const uint64_t folded = Folded(word);
      for (const Keyword& k : kKeywords) {
        if (k.size == word.size() && k.folded == folded) {
          token->kind = k.kind;
          return absl::OkStatus();
        }
      }
    }
    token->kind = TokenKind::kIdentifier;
    token->view = word;
    return absl::OkStatus();
  }

  // Java integer and floating-point literal syntax, without underscores, binary or hexadecimal
  // floating point: 57 57L 0x1F 017 7. 7.5 .5 7E3 7.5e-3 7d 7f.
  absl::Status Number(Token* token) {
    const size_t start = pos_;
    if (Peek() == '0' && (Peek(1) == 'x' || Peek(1) == 'X')) {
      pos_ += 2;
      const size_t digits = pos_;
      while (absl::ascii_isxdigit(Peek())) ++pos_;
      if (pos_ == digits) return Malformed(start);
      return Integer(token, start, text_.substr(digits, pos_ - digits), 16);
    }
    while (IsDigit(Peek())) ++pos_;
    const size_t int_end = pos_;
    bool approximate = false;
    if (Peek() == '.') {
      approximate = true;
      ++pos_;
      while (IsDigit(Peek())) ++pos_;
    }
    const size_t mantissa_end = pos_;
    if (Peek() == 'e' || Peek() == 'E') {
      approximate = true;
      ++pos_;
      if (Peek() == '+' || Peek() == '-') ++pos_;
      const size_t exp_digits = pos_;
      while (IsDigit(Peek())) ++pos_;
      if (pos_ == exp_digits) return Malformed(start);
    }
    const size_t number_end = pos_;
    const char suffix = Peek();
    if (suffix == 'd' || suffix == 'D' || suffix == 'f' || suffix == 'F') {
      approximate = true;
      ++pos_;
    }
    if (approximate) {
      if (IsAsciiIdentifierPart(Peek()) || Peek() == '.') return Malformed(start);
      token->kind = TokenKind::kDouble;
      // Hand from_chars one simple form, INT.FRAC[EXP], whatever Java spelling was used.
      absl::string_view int_part = text_.substr(start, int_end - start);
      absl::string_view fraction;
      if (int_end < mantissa_end) fraction = text_.substr(int_end + 1, mantissa_end - int_end - 1);
      const absl::string_view exponent = text_.substr(mantissa_end, number_end - mantissa_end);
      if (int_part.empty()) int_part = absl::string_view("0");
      if (fraction.empty()) fraction = absl::string_view("0");
      const std::string normalized = absl::StrCat(int_part, ".", fraction, exponent);
      double value = 0;
      const absl::from_chars_result r =
          absl::from_chars(normalized.data(), normalized.data() + normalized.size(), value);
      if (r.ec == std::errc::result_out_of_range) {
        return Error(start, absl::StrCat("number ", Printable(text_.substr(start, pos_ - start)),
                                         " is out of the range of double"));
      }
      if (r.ec != std::errc() || r.ptr != normalized.data() + normalized.size() ||
          !std::isfinite(value)) {
        return Malformed(start);
      }
      token->number = value;
      return absl::OkStatus();
    }
    const absl::string_view digits = text_.substr(start, int_end - start);
    if (digits.size() > 1 && digits[0] == '0') {
      return Integer(token, start, digits.substr(1), 8);
    }
    return Integer(token, start, digits, 10);
  }

  // `digits` in `base`, then an optional L suffix.
  absl::Status Integer(Token* token, size_t start, absl::string_view digits, int base) {
    if (Peek() == 'l' || Peek() == 'L') ++pos_;
    if (IsAsciiIdentifierPart(Peek()) || Peek() == '.') return Malformed(start);
    token->kind = TokenKind::kInteger;
    token->decimal = base == 10;
    if (base == 10 && digits.size() <= 18) {  // below 10^18 < 2^63: no overflow to check
      uint64_t value = 0;
      for (char c : digits) value = value * 10 + static_cast<uint64_t>(c - '0');
      token->integer = value;
      return absl::OkStatus();
    }
    const uint64_t limit = base == 10 ? (uint64_t{1} << 63) : UINT64_MAX;
    uint64_t value = 0;
    for (char c : digits) {
      const uint64_t d = IsDigit(c) ? static_cast<uint64_t>(c - '0')
                                    : static_cast<uint64_t>(absl::ascii_tolower(c) - 'a' + 10);
      if (d >= static_cast<uint64_t>(base)) {
        return Error(start, absl::StrCat("invalid octal literal ",
                                         Printable(text_.substr(start, pos_ - start))));
      }
      uint64_t next;
      if (__builtin_mul_overflow(value, static_cast<uint64_t>(base), &next) ||
          __builtin_add_overflow(next, d, &next) || next > limit) {
        return Error(start,
                     absl::StrCat("integer literal ", Printable(text_.substr(start, pos_ - start)),
                                  " is out of the range of a 64-bit integer"));
      }
      value = next;
    }
    token->integer = value;
    return absl::OkStatus();
  }

  absl::Status Malformed(size_t start) {
    size_t end = pos_;
    while (end < text_.size() && (IsAsciiIdentifierPart(text_[end]) || text_[end] == '.')) ++end;
    return Error(
        start,
        absl::StrCat("malformed number '",
                     Printable(text_.substr(start, std::min<size_t>(end - start, 40))), "'"));
  }

  absl::Status Error(size_t offset, absl::string_view message) const {
    return SyntaxError(text_, offset, message);
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::forward_list<std::string>* unescaped_;
};

}  // namespace

absl::Status Lexer::Next(Token* token) {
  Scanner scanner(text_, pos_, &unescaped_);
  absl::Status s = scanner.Scan(token);
  pos_ = scanner.pos();
  return s;
}

std::string PositionOf(absl::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const absl::string_view before = text.substr(0, offset);
  const size_t line = 1 + static_cast<size_t>(std::count(before.begin(), before.end(), '\n'));
  const size_t line_start = before.rfind('\n');
  const size_t column = line_start == absl::string_view::npos ? offset + 1 : offset - line_start;
  return absl::StrCat(line, ":", column);
}

absl::Status SyntaxError(absl::string_view text, size_t offset, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("selector:", PositionOf(text, offset), ": ", message));
}

std::string Describe(absl::string_view text, const Token& token) {
  if (token.kind == TokenKind::kEnd) return "end of selector";
  constexpr size_t kMaxShown = 32;
  absl::string_view source = text.substr(token.offset, token.length);
  // A string literal shows with its own quotes: found 'abc'.
  const absl::string_view quote = token.kind == TokenKind::kString ? "" : "'";
  if (source.size() <= kMaxShown) return absl::StrCat(quote, Printable(source), quote);
  size_t cut = 0;  // whole characters only
  while (cut < kMaxShown) cut += Utf8CharLength(source, cut);
  return absl::StrCat(quote, Printable(source.substr(0, cut)), "...", quote);
}

}  // namespace gryph::selector_ast
