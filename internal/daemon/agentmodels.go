package daemon

import (
	"fmt"
	"slices"
	"strings"

	"github.com/agentbox/agentbox/internal/agent/acp"
	"github.com/agentbox/agentbox/internal/agent/opencode"
	"github.com/agentbox/agentbox/internal/agent/pi"
)

// modelDeclarers are the agents whose provider configuration agentbox
// generates, so that the models it may offer are declared there: more
// models for them (serve --agent-models) reach that configuration, and the
// agent lists them itself.
var modelDeclarers = []string{pi.Name, opencode.Name, acp.NameOpenCode}

// maxDeclaredModels bounds the models one agent is given.
const maxDeclaredModels = 64

// ParseAgentModels reads serve --agent-models: entries separated by ";",
// each NAME=MODEL[,MODEL…], for the agents of modelDeclarers. A model id
// is at most 200 bytes of letters, digits and . _ : / @ + -, not starting
// with "-". "" is none.
func ParseAgentModels(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for entry := range strings.SplitSeq(s, ";") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, list, ok := strings.Cut(entry, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("agent models %q: want NAME=MODEL[,MODEL…]", entry)
		}
		if !slices.Contains(modelDeclarers, name) {
			return nil, fmt.Errorf("agent models: agent %q does not take declared models (only %s)", name, strings.Join(modelDeclarers, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("agent models: agent %s given twice", name)
		}
		var models []string
		for m := range strings.SplitSeq(list, ",") {
			m = strings.TrimSpace(m)
			if err := checkModelID(m); err != nil {
				return nil, fmt.Errorf("agent models: %s: %w", name, err)
			}
			if !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
		if len(models) > maxDeclaredModels {
			return nil, fmt.Errorf("agent models: %s: %d models, at most %d", name, len(models), maxDeclaredModels)
		}
		out[name] = models
	}
	return out, nil
}

// checkModelID refuses a model id that could be more than a name in the
// configuration files and command lines it reaches.
func checkModelID(m string) error {
	if m == "" || len(m) > 200 || strings.HasPrefix(m, "-") {
		return fmt.Errorf("model id %q: want 1 to 200 bytes, not starting with -", m)
	}
	for _, r := range m {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("._:/@+-", r) {
			return fmt.Errorf("model id %q: %q is not allowed (letters, digits and . _ : / @ + -)", m, r)
		}
	}
	return nil
}
