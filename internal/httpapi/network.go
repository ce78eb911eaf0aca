package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/engine"
	"github.com/agentbox/agentbox/internal/sandbox/egress"
)

// Secrets is what the API needs of the daemon's secret store;
// *egress.Secrets implements it.
type Secrets interface {
	List() []egress.SecretInfo
	Info(name string) (egress.SecretInfo, bool)
	Put(s egress.Secret, source string) error
	Delete(name string) bool
}

var _ Secrets = (*egress.Secrets)(nil)

type networkOutput struct{ Body client.SessionNetwork }

type setNetworkInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Body client.SetNetwork
}

type secretsOutput struct{ Body client.SecretList }

type secretPath struct {
	Name string `path:"name" minLength:"1" maxLength:"64" doc:"Secret name."`
}

type putSecretInput struct {
	Name string `path:"name" minLength:"1" maxLength:"64" doc:"Secret name."`
	Body client.PutSecret
}

type secretOutput struct{ Body client.SecretInfo }

func networkOps() []route {
	return []route{
		&op[sessionPath, networkOutput]{h: (*server).getNetwork, opSpec: opSpec{
			ID: "getSessionNetwork", Method: http.MethodGet, Path: "/v1/sessions/{id}/network", Tag: "network",
			Summary:     "Get a session's network rules",
			Description: "The network mode, default and allow/deny rules of the session's sandbox, and whether a running egress proxy enforces them.",
			Errors:      errs(http.StatusNotFound, http.StatusConflict),
		}},

		&op[setNetworkInput, networkOutput]{h: (*server).setNetwork, opSpec: opSpec{
			ID: "setSessionNetwork", Method: http.MethodPut, Path: "/v1/sessions/{id}/network", Tag: "network",
			Summary: "Replace a session's network allow rules",
			Description: "Replaces the allow rules of the session's sandbox network (deny rules and the default stay). Each rule must be covered " +
				"by the operator's global policy. A running sandbox's egress proxy decides every new connection by the new rules at once; " +
				"connections already open stay open. The rules are stored with the session (a resumed session keeps them) and the change is audited.",
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
				http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},

		&op[struct{}, secretsOutput]{h: (*server).listSecrets, opSpec: opSpec{
			ID: "listSecrets", Method: http.MethodGet, Path: "/v1/secrets", Tag: "network",
			Summary:     "List secrets",
			Description: "The secrets the egress proxy adds to requests for their hosts, without their values.",
			Errors:      errs(),
		}},

		&op[putSecretInput, secretOutput]{h: (*server).putSecret, opSpec: opSpec{
			ID: "putSecret", Method: http.MethodPut, Path: "/v1/secrets/{name}", Tag: "network",
			Summary: "Add or replace a secret",
			Description: "The value is kept in the daemon's memory only (lost when it stops), never returned, logged or written to disk. " +
				"A sandbox whose policy names the secret in env.secrets holds its placeholder; the egress proxy puts the value in the " +
				"header for the secret's host.",
			Errors: errs(http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
				http.StatusServiceUnavailable),
		}},

		&op[secretPath, struct{}]{h: (*server).deleteSecret, opSpec: opSpec{
			ID: "deleteSecret", Method: http.MethodDelete, Path: "/v1/secrets/{name}", Tag: "network",
			Summary: "Delete a secret",
			Status:  http.StatusNoContent,
			Errors:  errs(http.StatusNotFound, http.StatusServiceUnavailable),
		}},
	}
}

func toNetwork(n engine.Network) client.SessionNetwork {
	return client.SessionNetwork{Mode: n.Mode, Default: n.Default, Allow: nonNil(n.Allow), Deny: n.Deny, Live: n.Live}
}

func (s *server) getNetwork(ctx context.Context, in *sessionPath) (*networkOutput, error) {
	n, err := s.eng.Network(ctx, in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &networkOutput{Body: toNetwork(n)}, nil
}

func (s *server) setNetwork(ctx context.Context, in *setNetworkInput) (*networkOutput, error) {
	n, err := s.eng.SetNetwork(ctx, in.ID, in.Body.Allow)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &networkOutput{Body: toNetwork(n)}, nil
}

// secretsStore returns the store, or a 503 when the daemon has none.
func (s *server) secretsStore() (Secrets, error) {
	if s.cfg.Secrets == nil {
		return nil, newProblem(http.StatusServiceUnavailable, client.ProblemUnavailable, "This daemon keeps no secrets.")
	}
	return s.cfg.Secrets, nil
}

func toSecretInfo(i egress.SecretInfo) client.SecretInfo {
	return client.SecretInfo{Name: i.Name, Host: i.Host, Header: i.Header, Format: i.Format, InterceptTLS: i.InterceptTLS, Source: i.Source, Placeholder: i.Placeholder}
}

func (s *server) listSecrets(ctx context.Context, _ *struct{}) (*secretsOutput, error) {
	st, err := s.secretsStore()
	if err != nil {
		return nil, err
	}
	list := st.List()
	out := make([]client.SecretInfo, len(list))
	for i, in := range list {
		out[i] = toSecretInfo(in)
	}
	return &secretsOutput{Body: client.SecretList{Secrets: out}}, nil
}

func (s *server) putSecret(ctx context.Context, in *putSecretInput) (*secretOutput, error) {
	st, err := s.secretsStore()
	if err != nil {
		return nil, err
	}
	b := in.Body
	if err := st.Put(egress.Secret{Name: in.Name, Value: b.Value, Host: b.Host, Header: b.Header, Format: b.Format, InterceptTLS: b.InterceptTLS}, "api"); err != nil {
		return nil, s.fail(ctx, err)
	}
	info, _ := st.Info(in.Name)
	return &secretOutput{Body: toSecretInfo(info)}, nil
}

func (s *server) deleteSecret(ctx context.Context, in *secretPath) (*struct{}, error) {
	st, err := s.secretsStore()
	if err != nil {
		return nil, err
	}
	if !st.Delete(in.Name) {
		return nil, s.fail(ctx, fmt.Errorf("secret %q: %w", in.Name, engine.ErrNotFound))
	}
	return &struct{}{}, nil
}
