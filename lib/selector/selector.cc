#include "gryph/selector.h"

#include "absl/strings/str_cat.h"
#include "lib/selector/ast.h"
#include "lib/selector/parser.h"
#include "lib/selector/program.h"
#include "lib/util/coding.h"
#include "lib/util/status_macros.h"

namespace gryph {

namespace sp = selector_program;

Selector::Selector() = default;

Selector::Selector(const Selector& other)
    : program_(sp::ProgramRef::Share(other.program_).release()), text_(other.text_) {}

Selector::Selector(Selector&& other) noexcept
    : program_(std::exchange(other.program_, nullptr)), text_(std::move(other.text_)) {}

Selector& Selector::operator=(const Selector& other) {
  if (this != &other) *this = Selector(other);
  return *this;
}

Selector& Selector::operator=(Selector&& other) noexcept {
  std::swap(program_, other.program_);
  std::swap(text_, other.text_);
  return *this;
}

Selector::~Selector() { sp::ProgramRef drop(program_); }

absl::StatusOr<Selector> Selector::Parse(absl::string_view text, const SelectorOptions& options) {
  if (text.empty()) {
    // The commonest selector (topic-only subscriptions) shares one text: no allocation per
    // subscription.
    static const std::shared_ptr<const std::string>* const kEmpty =
        new std::shared_ptr<const std::string>(std::make_shared<const std::string>());
    return Selector(nullptr, *kEmpty);
  }
  GRYPH_ASSIGN_OR_RETURN(std::shared_ptr<const selector_ast::Ast> ast,
                         selector_ast::ParseSelector(text, options));
  sp::ProgramRef program;
  if (ast->root() != nullptr) {
    GRYPH_ASSIGN_OR_RETURN(program, sp::CompileTree(*ast->root()));
  }
  return Selector(program.release(), std::make_shared<const std::string>(text));
}

Truth Selector::Evaluate(const Event& event) const {
  if (program_ == nullptr) return Truth::kTrue;
  return program_->Evaluate(event);
}

const std::string& Selector::text() const {
  static const std::string* const kEmpty = new std::string();
  return text_ == nullptr ? *kEmpty : *text_;
}

bool Selector::matches_everything() const { return program_ == nullptr; }

std::string Selector::DebugString() const {
  if (program_ == nullptr) return "";
  const sp::View view(*program_);
  return view.ToString(*view.root());
}

void Selector::EncodeTo(std::string* out) const {
  out->push_back(static_cast<char>(kEncodingVersion));
  internal::PutLengthPrefixed(out, text());
  if (program_ != nullptr) out->append(program_->code().data(), program_->code().size());
}

std::string Selector::Encode() const {
  std::string out;
  EncodeTo(&out);
  return out;
}

absl::StatusOr<Selector> Selector::Decode(absl::string_view bytes) {
  internal::ByteReader in(bytes, "selector");
  uint8_t version = 0;
  if (!in.ReadByte(&version, "version")) return absl::DataLossError(in.status().message());
  if (version != kEncodingVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("selector encoding: unsupported version ", version));
  }
  absl::string_view text;
  if (!in.ReadLengthPrefixed(&text, "text")) return absl::DataLossError(in.status().message());
  const absl::string_view code = bytes.substr(in.offset());
  if (code.empty()) {
    // Only a blank text compiles to no program.
    if (text.find_first_not_of(" \t\n\r\f") != absl::string_view::npos) {
      return absl::DataLossError("selector encoding: a nonblank text without a program");
    }
    if (text.empty()) return Parse("");
    return Selector(nullptr, std::make_shared<const std::string>(text));
  }
  if (text.find_first_not_of(" \t\n\r\f") == absl::string_view::npos) {
    return absl::DataLossError("selector encoding: a program for a blank text");
  }
  GRYPH_ASSIGN_OR_RETURN(sp::ProgramRef program, sp::Program::Make(code));
  return Selector(program.release(), std::make_shared<const std::string>(text));
}

}  // namespace gryph
