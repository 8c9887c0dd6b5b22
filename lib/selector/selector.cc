#include "gryph/selector.h"

#include "lib/selector/ast.h"
#include "lib/selector/evaluator.h"
#include "lib/selector/parser.h"
#include "lib/util/status_macros.h"

namespace gryph {

Selector::Selector() = default;

absl::StatusOr<Selector> Selector::Parse(absl::string_view text, const SelectorOptions& options) {
  if (text.empty()) {
    // The commonest selector (topic-only subscriptions) shares one tree: no allocation per
    // subscription, and whoever asks whether it matches everything reads memory that is hot.
    static const std::shared_ptr<const selector_ast::Ast>* const kEmpty =
        new std::shared_ptr<const selector_ast::Ast>(
            *selector_ast::ParseSelector("", SelectorOptions()));
    return Selector(*kEmpty);
  }
  GRYPH_ASSIGN_OR_RETURN(std::shared_ptr<const selector_ast::Ast> ast,
                         selector_ast::ParseSelector(text, options));
  return Selector(std::move(ast));
}

Truth Selector::Evaluate(const Event& event) const {
  if (matches_everything()) return Truth::kTrue;
  return selector_ast::EvaluateCondition(*ast_->root(), event);
}

const std::string& Selector::text() const {
  static const std::string* const kEmpty = new std::string();
  return ast_ == nullptr ? *kEmpty : ast_->text();
}

bool Selector::matches_everything() const { return ast_ == nullptr || ast_->root() == nullptr; }

std::string Selector::DebugString() const {
  if (matches_everything()) return "";
  return selector_ast::ToString(*ast_->root());
}

}  // namespace gryph
