package httpapi

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/danielgtaylor/huma/v2"
)

// TestHumaErrorsInstalledByNew: importing the package leaves huma's
// process-wide error constructors alone (a program embedding agentbox may
// have its own huma API); New installs them. It runs in a fresh process,
// since other tests have called New already.
func TestHumaErrorsInstalledByNew(t *testing.T) {
	if os.Getenv("HTTPAPI_HUMA_CHILD") == "1" {
		var p *problem
		if errors.As(huma.NewError(400, "x"), &p) {
			t.Fatal("huma.NewError was replaced before New was called")
		}
		New(Config{}, nil, nil, nil)
		if !errors.As(huma.NewError(400, "x"), &p) || p.Type == "" {
			t.Fatal("New did not install the problem error constructor")
		}
		return
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHumaErrorsInstalledByNew$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HTTPAPI_HUMA_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
