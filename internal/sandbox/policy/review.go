package policy

import "slices"

// defaultReviewExempt are the hidden paths the commit applies without
// review when a policy says nothing (filesystem.review_exempt unset). Every
// other change to a hidden path (a component starting with ".") is held
// for review (package workspace). Each is here because no host tool runs or
// obeys it as commands, or because holding it would protect nothing:
//
//   - .gitignore: git ignore patterns, nothing else;
//   - .gitattributes: attributes only; a filter or diff driver it names
//     runs only if the host's own git configuration defines that driver
//     (and the commit protects what that configuration runs);
//   - .gitkeep, .keep: empty placeholders that keep a directory in git;
//   - .editorconfig: indentation, charset and line-end properties;
//   - .dockerignore, .prettierignore, .eslintignore, .npmignore: ignore
//     lists;
//   - .github/**: workflows run on the code host's runners, not here, and
//     only after the user pushes what they have seen; the Copilot files
//     under .github (instructions, prompts, chat modes, agents) are on the
//     protected list and stay dropped, whatever this list says;
//   - node_modules/**: what a package manager installs (.bin links,
//     .package-lock.json, packages' own dot-files); the code in
//     node_modules runs only when the project is run, and its non-hidden
//     files reach the host without review anyway, so holding its hidden
//     ones would protect nothing and make every install a review;
//   - .pytest_cache/**, .mypy_cache/**, .ruff_cache/**: data the test
//     runner and the checkers write for themselves (which tests failed,
//     type and lint results), read back as data, never run; holding them
//     would make every test run an agent starts a review.
//
// Protected patterns and the .git rules apply inside exempt paths too.
var defaultReviewExempt = []string{
	"**/.gitignore",
	"**/.gitattributes",
	"**/.gitkeep",
	"**/.keep",
	"**/.editorconfig",
	"**/.dockerignore",
	"**/.prettierignore",
	"**/.eslintignore",
	"**/.npmignore",
	"**/.github/**",
	"**/node_modules/**",
	"**/.pytest_cache/**",
	"**/.mypy_cache/**",
	"**/.ruff_cache/**",
}

// DefaultReviewExempt returns the patterns of hidden paths applied without
// review when a policy sets no filesystem.review_exempt (a copy).
func DefaultReviewExempt() []string { return slices.Clone(defaultReviewExempt) }

// reviewExempt is the policy's exempt list, the defaults when unset.
func (p *Policy) reviewExempt() []string {
	if p.Filesystem.ReviewExempt == nil {
		return DefaultReviewExempt()
	}
	return slices.Clone(p.Filesystem.ReviewExempt)
}
