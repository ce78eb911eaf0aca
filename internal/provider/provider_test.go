package provider

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/internal/errkind"
)

type named string

func (n named) Name() string                                           { return string(n) }
func (named) Capabilities() Capabilities                               { return Capabilities{} }
func (named) Health(context.Context) error                             { return nil }
func (named) Create(context.Context, Spec) (Sandbox, error)            { return Sandbox{}, nil }
func (named) Connect(context.Context, string, string) (Sandbox, error) { return Sandbox{}, nil }
func (named) Destroy(context.Context, string) error                    { return nil }

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	r.Register(named("docker"))
	r.Register(named("e2b"))
	if got := r.Names(); len(got) != 2 || got[0] != "docker" || got[1] != "e2b" {
		t.Fatalf("Names = %v", got)
	}
	if p, err := r.Get("docker"); err != nil || p.Name() != "docker" {
		t.Fatalf("Get(docker) = %v, %v", p, err)
	}
	_, err := r.Get("nope")
	if !errors.Is(err, ErrUnknown) || !errors.Is(err, errkind.Invalid) {
		t.Fatalf("Get(nope) = %v, want ErrUnknown of kind Invalid", err)
	}
	for _, name := range []string{"docker", ""} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", name)
				}
			}()
			r.Register(named(name))
		}()
	}
}
