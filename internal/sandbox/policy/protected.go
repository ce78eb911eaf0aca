package policy

import "slices"

// builtinProtected are the workspace paths no policy can make writable
// from inside a sandbox. The rule for inclusion: a file that something on
// the host runs or obeys later without anyone choosing to run project code
// — an agent reading its instructions or settings at start, an editor
// opening the folder, git running a hook or a config-defined command
// (core.fsmonitor, core.hooksPath, a filter), a shell starting, direnv
// entering the directory, a package manager reading its rc file. Writing
// one of them is how a sandboxed agent would escape into the next session
// or onto the host, so the copy-back drops every change to them.
//
// Every pattern starts with "**/": any directory of a workspace may later
// be opened as a project (or be someone's home), so a nested
// sub/.claude/settings.json is as dangerous as the top-level one.
var builtinProtected = []string{
	// Coding-agent instructions, settings, hooks and MCP servers.
	"**/CLAUDE.md",
	"**/CLAUDE.local.md",
	"**/.claude/**",
	"**/AGENTS.md",
	"**/AGENTS.override.md",
	"**/.codex/**",
	"**/GEMINI.md",
	"**/.gemini/**",
	"**/.opencode/**",
	"**/opencode.json",
	"**/opencode.jsonc",
	"**/.pi/**",
	"**/.mcp.json",
	"**/.cursorrules",
	"**/.cursor/**",
	"**/.windsurfrules",
	"**/.windsurf/**",
	"**/.clinerules/**", // a file or a directory
	"**/.roo/**",
	"**/.continue/**",
	"**/.aider.conf.yml",
	"**/.github/copilot-instructions.md",
	// Editors and dev containers: tasks, launch configs, extensions and
	// settings that run commands when the folder is opened.
	"**/.vscode/**",
	"**/.idea/**",
	"**/.zed/**",
	"**/.devcontainer/**",
	// Git: hooks run on commit/checkout; config can run commands
	// (core.fsmonitor, core.sshCommand, filters, aliases); .gitmodules
	// points fetches at arbitrary URLs.
	"**/.git/hooks/**",
	"**/.git/config",
	"**/.git/modules/**/hooks/**",
	"**/.git/modules/**/config",
	"**/.gitmodules",
	// Shells and direnv: run at every new shell or cd.
	"**/.envrc",
	"**/.bashrc",
	"**/.bash_profile",
	"**/.bash_login",
	"**/.bash_logout",
	"**/.profile",
	"**/.zshrc",
	"**/.zshenv",
	"**/.zprofile",
	"**/.zlogin",
	"**/.config/fish/**",
	// Tool configuration read from the working directory or home:
	// credentials, registries, script shells, commands.
	"**/.gitconfig",
	"**/.npmrc",
	"**/.yarnrc",
	"**/.yarnrc.yml",
	"**/.netrc",
	"**/.pypirc",
	"**/.ssh/**",
}

// BuiltinProtected returns the built-in protected patterns (a copy). They
// are always part of an effective policy; a policy can only add to them.
func BuiltinProtected() []string { return slices.Clone(builtinProtected) }
