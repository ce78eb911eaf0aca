package policy

// ProtectedName is one entry of the built-in protected list: a workspace
// path pattern, the tool that reads what it matches, and what writing it
// would make the host do. A change the commit drops because of it is
// reported with the rule "protected:<Pattern>".
type ProtectedName struct {
	Pattern string
	Tool    string
	Why     string
}

// builtinNames are the workspace paths no policy can make writable from
// inside a sandbox: the researched list of known dangerous names. The rule
// for inclusion: a file that something on the host runs or obeys later
// without anyone choosing to run project code — an agent reading its
// instructions or settings at start, an editor opening the folder, git
// running a hook or a config-defined command, a shell starting, direnv or
// a version manager entering the directory, a package manager or build
// tool reading its rc file. Writing one of them is how a sandboxed agent
// would escape into the next session or onto the host, so the commit drops
// every change to them. Files that only matter in a home directory are
// listed too: a workspace must never be a home, but if one is, nothing in
// it that a login or a tool start would run may change.
//
// No list is complete; the commit's other mechanisms cover the file that
// is not on it: hidden paths are held for review (package workspace), the
// .git rules keep git directories to what git writes, and the host's git
// configuration's hooks, includes and commands are protected wherever
// they point.
//
// Every pattern starts with "**/": any directory of a workspace may later
// be opened as a project (or be someone's home), so a nested
// sub/.claude/settings.json is as dangerous as the top-level one. Matching
// is case- and Unicode-insensitive (workspace.Fold).
var builtinNames = []ProtectedName{
	// Coding agents: instructions read into the model's context at every
	// start (a prompt injection that outlives the session and runs with
	// the user's permissions), settings that allow tools or run hooks,
	// MCP servers (commands the agent starts).
	{"**/CLAUDE.md", "Claude Code", "project instructions loaded into every session"},
	{"**/CLAUDE.local.md", "Claude Code", "personal instructions loaded into every session"},
	{"**/.claude/**", "Claude Code", "settings (permissions, hooks that run shell commands), commands, agents, skills"},
	{"**/.claude.json", "Claude Code", "user configuration with per-project MCP servers and allowed tools"},
	{"**/.mcp.json", "Claude Code and other MCP clients", "project MCP servers: commands the agent starts"},
	{"**/AGENTS.md", "Codex, OpenCode, Amp, Cursor, Zed, Jules and others", "instructions loaded at start"},
	{"**/AGENTS.override.md", "Codex", "instructions that replace AGENTS.md"},
	{"**/AGENT.md", "Amp, Zed", "instructions loaded at start"},
	{"**/.codex/**", "Codex", "config.toml (MCP servers, approval and sandbox settings), prompts"},
	{"**/GEMINI.md", "Gemini CLI", "context file loaded at start"},
	{"**/.gemini/**", "Gemini CLI", "settings.json (MCP servers, allowed tools), commands, extensions"},
	{"**/.opencode/**", "OpenCode", "agents, commands and plugins (JavaScript OpenCode runs)"},
	{"**/opencode.json", "OpenCode", "configuration: MCP servers, permissions, instructions"},
	{"**/opencode.jsonc", "OpenCode", "configuration: MCP servers, permissions, instructions"},
	{"**/.opencode.json", "OpenCode (Go version)", "configuration: MCP servers, shell, context files"},
	{"**/.pi/**", "pi", "settings, extensions (code pi loads), system prompt"},
	{"**/.cursorrules", "Cursor", "rules added to every request"},
	{"**/.cursor/**", "Cursor", "rules, mcp.json (MCP servers), hooks.json (commands run on agent events)"},
	{"**/.windsurfrules", "Windsurf", "rules added to every request"},
	{"**/.windsurf/**", "Windsurf", "rules and workflows"},
	{"**/.codeium/**", "Windsurf (Codeium)", "mcp_config.json (MCP servers), global rules"},
	{"**/.clinerules/**", "Cline", "rules and workflows (a file or a directory)"},
	{"**/.roo/**", "Roo Code", "rules, mcp.json (MCP servers)"},
	{"**/.roomodes", "Roo Code", "custom modes: prompts and the tools each may use"},
	{"**/.roorules*", "Roo Code", "rules, and rules per mode (.roorules-<mode>)"},
	{"**/.kilocode/**", "Kilo Code", "rules, workflows, mcp.json (MCP servers)"},
	{"**/.kilocodemodes", "Kilo Code", "custom modes: prompts and the tools each may use"},
	{"**/.continue/**", "Continue", "configuration (models, MCP servers), rules, prompts"},
	{"**/.continuerc.json", "Continue", "workspace configuration merged into the user's"},
	{"**/.aider.conf.yml", "Aider", "options, including the lint and test commands Aider runs after each edit"},
	{"**/.aider.model.settings.yml", "Aider", "model settings: endpoints and extra request parameters"},
	{"**/.aider.model.metadata.json", "Aider", "model metadata"},
	{"**/.github/copilot-instructions.md", "GitHub Copilot", "instructions added to every chat"},
	{"**/.github/instructions/**", "GitHub Copilot", "path-specific instructions (*.instructions.md)"},
	{"**/.github/prompts/**", "GitHub Copilot", "reusable prompts (*.prompt.md)"},
	{"**/.github/chatmodes/**", "GitHub Copilot", "custom chat modes: instructions and tools"},
	{"**/.github/agents/**", "GitHub Copilot", "custom agents: instructions and tools"},
	{"**/.amp/**", "Amp", "workspace settings: MCP servers, allowed commands"},
	{"**/.rules", "Zed", "project rules for its agent"},
	{"**/.junie/**", "Junie (JetBrains)", "guidelines.md loaded as instructions, MCP configuration"},
	{"**/.aiassistant/**", "JetBrains AI Assistant", "project rules"},
	{"**/.kiro/**", "Kiro", "steering files (instructions), hooks run on file events, MCP settings"},
	{"**/.amazonq/**", "Amazon Q Developer", "rules, mcp.json (MCP servers), agent configurations"},
	{"**/.augment/**", "Augment", "rules added to requests"},
	{"**/.augment-guidelines", "Augment", "workspace guidelines added to requests"},
	{"**/WARP.md", "Warp", "project rules for its agent"},
	{"**/QWEN.md", "Qwen Code", "context file loaded at start"},
	{"**/.qwen/**", "Qwen Code", "settings: MCP servers, tools"},
	{"**/CRUSH.md", "Crush", "context file loaded at start"},
	{"**/crush.json", "Crush", "configuration: MCP servers, language servers it starts"},
	{"**/.crush.json", "Crush", "configuration: MCP servers, language servers it starts"},
	{"**/.crush/**", "Crush", "its session database and logs (history a resumed session trusts)"},
	{"**/.goosehints", "Goose", "hints loaded as instructions"},
	{"**/.trae/**", "Trae", "project rules"},
	{"**/.tabnine/**", "Tabnine", "guidelines, MCP servers"},
	{"**/.openhands/**", "OpenHands", "setup.sh run at the start of every session, microagents (instructions)"},
	{"**/.idx/**", "Firebase Studio (IDX)", "dev.nix (environment and start-up commands), airules.md"},

	// Editors, IDEs and dev environments: tasks and launch configurations
	// that run commands when the folder is opened, settings naming the
	// programs the editor runs (language servers, formatters), extensions.
	{"**/.vscode/**", "VS Code, Cursor, Windsurf and other VS Code forks", "tasks.json (tasks run on folder open), launch.json, settings naming programs, mcp.json"},
	{"**/*.code-workspace", "VS Code", "workspace file: settings, tasks and launch configurations as in .vscode"},
	{"**/.idea/**", "JetBrains IDEs", "run configurations, startup tasks, tool paths"},
	{"**/.fleet/**", "JetBrains Fleet", "run configurations, settings"},
	{"**/.zed/**", "Zed", "settings.json (language servers and their commands), tasks.json"},
	{"**/.vs/**", "Visual Studio", "tasks.vs.json, launch.vs.json"},
	{"**/.theia/**", "Eclipse Theia", "tasks, launch configurations, settings"},
	{"**/.devcontainer/**", "Dev Containers", "devcontainer.json: initializeCommand (run on the host), image, mounts, lifecycle commands"},
	{"**/.devcontainer.json", "Dev Containers", "devcontainer.json at the top of the folder"},
	{"**/.gitpod.yml", "Gitpod", "tasks run when a workspace starts"},
	{"**/.replit", "Replit", "the run command and environment"},
	{"**/replit.nix", "Replit", "the environment's packages"},
	{"**/.exrc", "Vim, Neovim ('exrc')", "commands run at start in the directory"},
	{"**/.nvimrc", "Neovim ('exrc')", "commands run at start in the directory"},
	{"**/.nvim.lua", "Neovim ('exrc')", "Lua run at start in the directory"},
	{"**/.lvimrc", "vim-localvimrc", "commands run on entering the directory"},
	{"**/.vimrc", "Vim", "commands run at every start (a home)"},
	{"**/.config/nvim/**", "Neovim", "init.lua and plugins run at every start (a home)"},
	{"**/.dir-locals.el", "Emacs", "directory variables, including eval forms"},
	{"**/.dir-locals-2.el", "Emacs", "directory variables, including eval forms"},

	// Git: hooks run on commit and checkout; config runs commands
	// (core.fsmonitor, core.sshCommand, filters, aliases); .gitmodules
	// points fetches at any URL. (The commit's .git rules and the host's
	// git configuration protect more; these name what reports show.)
	{"**/.git/hooks/**", "git", "hooks run by commit, checkout, merge, push"},
	{"**/.git/config", "git", "repository configuration: commands (core.fsmonitor, filters, aliases), hooksPath, includes"},
	{"**/.git/modules/**/hooks/**", "git", "submodules' hooks"},
	{"**/.git/modules/**/config", "git", "submodules' configuration"},
	{"**/.gitmodules", "git", "submodule URLs and paths fetched by clone --recursive and submodule update"},
	{"**/.gitconfig", "git", "user configuration: aliases, core.* commands, includes (a home)"},
	{"**/.git-credentials", "git", "stored credentials (a home)"},
	{"**/.config/git/**", "git", "XDG user configuration, attributes, ignore (a home)"},
	{"**/.lfsconfig", "Git LFS", "lfs.url: where objects and credentials are sent"},
	{"**/.pre-commit-config.yaml", "pre-commit", "hooks run by git commit once pre-commit is installed (local hooks are any command)"},
	{"**/.pre-commit-hooks.yaml", "pre-commit", "hooks this repository provides"},
	{"**/.husky/**", "husky", "git hooks (core.hooksPath .husky)"},
	{"**/lefthook.*", "lefthook", "git hook commands"},
	{"**/.lefthook.*", "lefthook", "git hook commands"},
	{"**/lefthook-local.*", "lefthook", "local git hook commands"},
	{"**/.lefthook-local.*", "lefthook", "local git hook commands"},
	{"**/.lefthook/**", "lefthook", "hook scripts"},
	{"**/.overcommit.yml", "overcommit", "git hook configuration"},
	{"**/.githooks/**", "git (core.hooksPath convention)", "hooks of repositories set up with core.hooksPath .githooks"},

	// Shells, direnv and version managers: run at every new shell or on
	// entering the directory.
	{"**/.envrc", "direnv", "shell code run on entering the directory"},
	{"**/.bashrc", "bash", "run by every interactive shell"},
	{"**/.bash_profile", "bash", "run by every login shell"},
	{"**/.bash_login", "bash", "run by every login shell"},
	{"**/.bash_logout", "bash", "run when a login shell exits"},
	{"**/.bash_aliases", "bash (Debian's .bashrc)", "sourced by every interactive shell"},
	{"**/.profile", "sh, bash, dash", "run by every login shell"},
	{"**/.zshrc", "zsh", "run by every interactive shell"},
	{"**/.zshenv", "zsh", "run by every shell"},
	{"**/.zprofile", "zsh", "run by every login shell"},
	{"**/.zlogin", "zsh", "run by every login shell"},
	{"**/.zlogout", "zsh", "run when a login shell exits"},
	{"**/.kshrc", "ksh", "run by every interactive shell"},
	{"**/.mkshrc", "mksh", "run by every interactive shell"},
	{"**/.cshrc", "csh, tcsh", "run by every shell"},
	{"**/.tcshrc", "tcsh", "run by every shell"},
	{"**/.login", "csh, tcsh", "run by every login shell"},
	{"**/.logout", "csh, tcsh", "run when a login shell exits"},
	{"**/.config/fish/**", "fish", "config.fish and functions run by every shell"},
	{"**/.xinitrc", "X", "run when an X session starts"},
	{"**/.xprofile", "X display managers", "run at graphical login"},
	{"**/.xsession", "X display managers", "the graphical session itself"},
	{"**/.config/autostart/**", "desktop sessions (XDG autostart)", "programs started at login"},
	{"**/.config/systemd/**", "systemd --user", "units started at login or on timers"},
	{"**/.tool-versions", "asdf, mise", "versions of every tool run through shims here, including path: versions (binaries from any directory)"},
	{"**/mise.toml", "mise", "environment, hooks (on entering the directory) and tasks"},
	{"**/.mise.toml", "mise", "environment, hooks (on entering the directory) and tasks"},
	{"**/mise.*.toml", "mise", "environment-specific and local configuration (mise.local.toml, mise.<env>.toml)"},
	{"**/.mise.*.toml", "mise", "environment-specific and local configuration"},
	{"**/.mise/**", "mise", "configuration directory"},
	{"**/mise/config.toml", "mise", "configuration"},
	{"**/.config/mise/**", "mise", "configuration directory"},
	{"**/.rtx.toml", "rtx (mise's former name)", "environment, hooks and tasks"},

	// Package managers and build tools: rc files that run code on every
	// command, point installs at another registry, or pick the binaries
	// that run.
	{"**/.npmrc", "npm", "registry, credentials, script-shell, node-options (code at every npm command)"},
	{"**/.yarnrc", "Yarn 1", "registry, yarn-path (a file run for every yarn command)"},
	{"**/.yarnrc.yml", "Yarn 2+", "yarnPath and plugins: code run for every yarn command"},
	{"**/.yarn/releases/**", "Yarn 2+", "the Yarn release yarnPath runs"},
	{"**/.yarn/plugins/**", "Yarn 2+", "plugins loaded by every yarn command"},
	{"**/.pnpmfile.cjs", "pnpm", "hooks run on every install"},
	{"**/bunfig.toml", "Bun", "preload scripts run before bun run and bun test, registry"},
	{"**/.bunfig.toml", "Bun", "preload scripts, registry (a home)"},
	{"**/pip.conf", "pip", "index URL and options (in a virtualenv or a home)"},
	{"**/pip.ini", "pip", "index URL and options"},
	{"**/.pypirc", "twine, setuptools", "upload repositories and credentials"},
	{"**/.pydistutils.cfg", "setuptools", "build options (a home)"},
	{"**/.condarc", "conda", "channels packages are installed from"},
	{"**/.cargo/**", "Cargo", "config.toml: target runner, linker, rustc wrapper (cargo build, which editors run on open)"},
	{"**/rust-toolchain", "rustup", "toolchain for the directory, including a path to any binaries"},
	{"**/rust-toolchain.toml", "rustup", "toolchain for the directory, including a path to any binaries"},
	{"**/.mvn/**", "Maven", "jvm.config, maven.config, extensions.xml (code loaded by every mvn run), wrapper"},
	{"**/.m2/**", "Maven", "settings.xml (repositories, credentials), local repository (a home)"},
	{"**/.gradle/init.d/**", "Gradle", "init scripts run by every build (a home)"},
	{"**/.gradle/init.*", "Gradle", "init script run by every build (a home)"},
	{"**/.gradle/gradle.properties", "Gradle", "JVM arguments and properties of every build (a home)"},
	{"**/.sbtopts", "sbt", "options of every sbt run"},
	{"**/.jvmopts", "sbt", "JVM options (a -javaagent runs code)"},
	{"**/.bazelrc", "Bazel", "options, including commands run during builds (workspace_status_command)"},
	{"**/.bazeliskrc", "Bazelisk", "where the Bazel binary it runs is downloaded from"},
	{"**/.bazelversion", "Bazelisk", "which Bazel binary it downloads and runs (a fork is allowed)"},
	{"**/.terraformrc", "Terraform", "provider installation: the binaries it runs (a home)"},
	{"**/.irbrc", "IRB", "Ruby run at start in the directory"},
	{"**/.pryrc", "Pry", "Ruby run at start in the directory"},
	{"**/.gemrc", "RubyGems", "sources and options (a home)"},
	{"**/.Rprofile", "R", "R code run at start in the directory"},
	{"**/.Renviron", "R", "environment of every R start in the directory"},
	{"**/.julia/config/**", "Julia", "startup.jl run at every start (a home)"},
	{"**/.ipython/**", "IPython", "startup scripts and configuration run at every start (a home)"},
	{"**/.jupyter/**", "Jupyter", "configuration files (Python) run at every start (a home)"},

	// Credentials and the configuration of tools that run commands from it
	// (a home).
	{"**/.netrc", "curl, git, ftp", "credentials sent to hosts"},
	{"**/.ssh/**", "ssh", "keys, authorized_keys, config (ProxyCommand, LocalCommand)"},
	{"**/.gnupg/**", "GnuPG", "gpg.conf, gpg-agent.conf (pinentry and other programs it runs), keys"},
	{"**/.aws/**", "AWS CLI and SDKs", "credentials, credential_process commands"},
	{"**/.kube/**", "kubectl", "kubeconfig: exec credential plugins (commands)"},
	{"**/.docker/**", "Docker", "config.json: credential helpers, CLI plugins"},
	{"**/.config/gh/**", "GitHub CLI", "aliases with shell commands, tokens"},
	{"**/.curlrc", "curl", "options of every run (output files, proxies)"},
	{"**/.wgetrc", "wget", "options of every run"},
	{"**/.psqlrc", "psql", "commands (\\!) run at start"},
	{"**/.gdbinit", "gdb", "commands run at start"},
	{"**/.lldbinit", "lldb", "commands run at start"},
	{"**/.tmux.conf", "tmux", "run-shell commands at start"},
	{"**/.screenrc", "GNU screen", "commands at start"},
	{"**/.mailcap", "mailcap users (mutt, w3m, run-mailcap)", "commands run to view a file type"},
}

// BuiltinProtected returns the built-in protected patterns (a copy). They
// are always part of an effective policy; a policy can only add to them.
func BuiltinProtected() []string {
	out := make([]string, len(builtinNames))
	for i, n := range builtinNames {
		out[i] = n.Pattern
	}
	return out
}
