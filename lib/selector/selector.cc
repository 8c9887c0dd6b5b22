#include "gryph/selector.h"

#include <atomic>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "lib/selector/parser.h"
#include "lib/selector/program.h"
#include "lib/util/coding.h"
#include "lib/util/crc32c.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace sp = selector_program;

struct Selector::Text {
  mutable std::atomic<uint32_t> refs{1};
  size_t size = 0;
  absl::string_view view() const { return {reinterpret_cast<const char*>(this + 1), size}; }

  // A new text holding a copy of `s`, with one reference; null for an empty one (the commonest
  // selector, that of topic-only subscriptions, allocates nothing).
  static const Text* Make(absl::string_view s) {
    if (s.empty()) return nullptr;
    void* mem = ::operator new(sizeof(Text) + s.size());
    Text* t = new (mem) Text();
    t->size = s.size();
    std::memcpy(static_cast<char*>(mem) + sizeof(Text), s.data(), s.size());
    return t;
  }
  static const Text* Share(const Text* t) {
    if (t != nullptr) t->refs.fetch_add(1, std::memory_order_relaxed);
    return t;
  }
  static void Drop(const Text* t) {
    if (t != nullptr && t->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      t->~Text();
      ::operator delete(const_cast<Text*>(t));
    }
  }
};

Selector::Selector() = default;

Selector::Selector(const Selector& other)
    : program_(sp::ProgramRef::Share(other.program_).release()), text_(Text::Share(other.text_)) {}

Selector::Selector(Selector&& other) noexcept
    : program_(std::exchange(other.program_, nullptr)),
      text_(std::exchange(other.text_, nullptr)) {}

Selector& Selector::operator=(const Selector& other) {
  if (this != &other) *this = Selector(other);
  return *this;
}

Selector& Selector::operator=(Selector&& other) noexcept {
  std::swap(program_, other.program_);
  std::swap(text_, other.text_);
  return *this;
}

Selector::~Selector() {
  sp::ProgramRef drop(program_);
  Text::Drop(text_);
}

absl::StatusOr<Selector> Selector::Parse(absl::string_view text, const SelectorOptions& options) {
  if (text.empty()) return Selector();
  GRYPH_ASSIGN_OR_RETURN(sp::ProgramRef program, selector_ast::ParseSelector(text, options));
  return Selector(program.release(), Text::Make(text));
}

Truth Selector::Evaluate(const Event& event) const {
  if (program_ == nullptr) return Truth::kTrue;
  return program_->Evaluate(event);
}

absl::string_view Selector::text() const {
  return text_ == nullptr ? absl::string_view() : text_->view();
}

bool Selector::matches_everything() const { return program_ == nullptr; }

std::string Selector::DebugString() const {
  if (program_ == nullptr) return "";
  const sp::View view(*program_);
  return view.ToString(*view.root());
}

void Selector::EncodeTo(std::string* out) const {
  const size_t start = out->size();
  out->push_back(static_cast<char>(kEncodingVersion));
  internal::PutLengthPrefixed(out, text());
  internal::PutLengthPrefixed(out, program_ == nullptr ? absl::string_view() : program_->code());
  const uint32_t crc = internal::Crc32c(absl::string_view(*out).substr(start));
  internal::PutFixed32BE(out, crc);
}

std::string Selector::Encode() const {
  std::string out;
  EncodeTo(&out);
  return out;
}

absl::StatusOr<Selector> Selector::Decode(absl::string_view bytes) {
  if (bytes.empty()) return absl::DataLossError("selector encoding: empty");
  if (static_cast<uint8_t>(bytes[0]) != kEncodingVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector encoding: unsupported version ", static_cast<uint8_t>(bytes[0])));
  }
  if (bytes.size() < 1 + 4) return absl::DataLossError("selector encoding: truncated");
  const absl::string_view body = bytes.substr(0, bytes.size() - 4);
  if (internal::Crc32c(body) != internal::DecodeFixed32BE(bytes.data() + body.size())) {
    return absl::DataLossError("selector encoding: checksum mismatch");
  }
  internal::ByteReader in(body.substr(1), "selector");
  absl::string_view text;
  absl::string_view code;
  if (!in.ReadLengthPrefixed(&text, "text") || !in.ReadLengthPrefixed(&code, "program") ||
      !in.ExpectEnd()) {
    return absl::DataLossError(in.status().message());
  }
  return FromProgram(text, code);
}

namespace {

// The checksum of a stored program: CRC-32C of the text's length (4 bytes, big-endian), the text,
// then the version and the program (`body`), so that a program stored with another text fails.
uint32_t ProgramChecksum(absl::string_view text, absl::string_view body) {
  std::string length;
  internal::PutFixed32BE(&length, static_cast<uint32_t>(text.size()));
  return internal::Crc32cExtend(internal::Crc32cExtend(internal::Crc32c(length), text), body);
}

}  // namespace

std::string Selector::EncodeProgram() const {
  std::string out(1, static_cast<char>(kEncodingVersion));
  if (program_ != nullptr) absl::StrAppend(&out, program_->code());
  internal::PutFixed32BE(&out, ProgramChecksum(text(), out));
  return out;
}

absl::StatusOr<Selector> Selector::DecodeProgram(absl::string_view text, absl::string_view bytes) {
  if (bytes.empty()) return absl::DataLossError("selector program encoding: empty");
  if (static_cast<uint8_t>(bytes[0]) != kEncodingVersion) {
    return absl::InvalidArgumentError(absl::StrCat(
        "selector program encoding: unsupported version ", static_cast<uint8_t>(bytes[0])));
  }
  if (bytes.size() < 1 + 4) return absl::DataLossError("selector program encoding: truncated");
  const absl::string_view body = bytes.substr(0, bytes.size() - 4);
  if (ProgramChecksum(text, body) != internal::DecodeFixed32BE(bytes.data() + body.size())) {
    return absl::DataLossError(
        "selector program encoding: checksum mismatch (damaged, or stored with another text)");
  }
  return FromProgram(text, body.substr(1));
}

absl::StatusOr<Selector> Selector::FromProgram(absl::string_view text, absl::string_view code) {
  const bool blank = text.find_first_not_of(" \t\n\r\f") == absl::string_view::npos;
  if (code.empty()) {
    // Only a blank text compiles to no program.
    if (!blank) return absl::DataLossError("selector encoding: a nonblank text without a program");
    return Selector(nullptr, Text::Make(text));
  }
  if (blank) return absl::DataLossError("selector encoding: a program for a blank text");
  GRYPH_ASSIGN_OR_RETURN(sp::ProgramRef program, sp::Program::Make(code));
  return Selector(program.release(), Text::Make(text));
}

}  // namespace gryph
