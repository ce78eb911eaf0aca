package egress

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestSecretValidate(t *testing.T) {
	good := Secret{Name: "gh.token-1_a", Value: "v", Host: "api.github.com", Header: "Authorization", Format: "Bearer {value}"}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%+v): %v", good, err)
	}
	for _, s := range []Secret{
		{Name: "x", Value: "v", Host: "*.github.com", Header: "X-Key"},
		{Name: "k", Value: "v", Host: "localhost", Header: "x-api-key"},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", s, err)
		}
	}
	for _, mut := range []func(*Secret){
		func(s *Secret) { s.Name = "" },
		func(s *Secret) { s.Name = "-x" },
		func(s *Secret) { s.Name = "a/b" },
		func(s *Secret) { s.Name = strings.Repeat("a", 65) },
		func(s *Secret) { s.Value = "" },
		func(s *Secret) { s.Value = "a\r\nX-Injected: 1" },
		func(s *Secret) { s.Value = "a\x00" },
		func(s *Secret) { s.Host = "" },
		func(s *Secret) { s.Host = "*" },
		func(s *Secret) { s.Host = "api.github.com:443" },
		func(s *Secret) { s.Host = "10.0.0.0/8" },
		func(s *Secret) { s.Host = "1.2.3.4" },
		func(s *Secret) { s.Host = "http://api.github.com" },
		func(s *Secret) { s.Header = "" },
		func(s *Secret) { s.Header = "X Key" },
		func(s *Secret) { s.Header = "X-Key:" },
		func(s *Secret) { s.Header = "X-Kéy" },
		func(s *Secret) { s.Format = "Bearer {value}\r\nX: y" },
	} {
		s := good
		mut(&s)
		err := s.Validate()
		if err == nil {
			t.Errorf("Validate(%+v) passed", s)
			continue
		}
		if !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("Validate(%+v) = %v, not ErrInvalidSecret", s, err)
		}
		if s.Value != "" && strings.Contains(err.Error(), s.Value) && len(s.Value) > 1 {
			t.Errorf("Validate's error shows the value: %v", err)
		}
	}
}

func TestSecretsStore(t *testing.T) {
	st := NewSecrets()
	if err := st.Put(Secret{Name: "b", Value: "secret-value-b", Host: "b.test", Header: "X-B"}, "env:B"); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(Secret{Name: "a", Value: "secret-value-a", Host: "*.a.test", Header: "Authorization", Format: "Bearer {value}"}, "api"); err != nil {
		t.Fatal(err)
	}
	if err := st.Put(Secret{Name: "bad", Host: "x.test", Header: "X"}, "api"); err == nil {
		t.Error("Put took a secret without a value")
	}
	if got := st.List(); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("Names = %v", got)
	}
	list := st.List()
	if len(list) != 2 || list[0].Name != "a" || list[0].Source != "api" || list[0].Placeholder != Placeholder("a") || list[1].Source != "env:B" {
		t.Errorf("List = %+v", list)
	}
	b, _ := json.Marshal(list)
	if strings.Contains(string(b), "secret-value-a") || strings.Contains(string(b), "secret-value-b") {
		t.Errorf("List shows a value: %s", b)
	}
	sec, ok := st.Secret("a")
	if !ok || sec.Value != "secret-value-a" {
		t.Errorf("Secret(a) = %+v, %v", sec, ok)
	}
	if b, _ := json.Marshal(sec); strings.Contains(string(b), "secret-value-a") {
		t.Errorf("a Secret marshals its value: %s", b)
	}
	if info, ok := st.Info("b"); !ok || info.Host != "b.test" || info.Header != "X-B" {
		t.Errorf("Info(b) = %+v, %v", info, ok)
	}
	if _, ok := st.Info("nope"); ok {
		t.Error("Info(nope) found something")
	}
	// Replace, then delete.
	if err := st.Put(Secret{Name: "b", Value: "secret-value-b2", Host: "b.test", Header: "X-B"}, "api"); err != nil {
		t.Fatal(err)
	}
	if sec, _ := st.Secret("b"); sec.Value != "secret-value-b2" {
		t.Errorf("Secret(b) after Put = %+v", sec)
	}
	if !st.Delete("b") || st.Delete("b") {
		t.Error("Delete")
	}
	if _, ok := st.Secret("b"); ok {
		t.Error("Secret(b) after Delete")
	}
}

func TestInject(t *testing.T) {
	secrets := []Secret{
		{Name: "gh", Value: "gh-real", Host: "api.github.com", Header: "Authorization", Format: "Bearer {value}"},
		{Name: "gl", Value: "gl-real", Host: "*.gitlab.com", Header: "Private-Token"},
		{Name: "g", Value: "g-real", Host: "other.test", Header: "X-G"},
	}
	tests := []struct {
		host string
		in   http.Header
		want http.Header
		used []string
	}{
		{"api.github.com",
			http.Header{"Authorization": {"Bearer " + Placeholder("gh")}, "X-Other": {"x " + Placeholder("gh") + " y"}},
			// Only the secret's own header: a placeholder elsewhere stays,
			// or an upstream echoing X-Other would hand the value back.
			http.Header{"Authorization": {"Bearer gh-real"}, "X-Other": {"x " + Placeholder("gh") + " y"}}, []string{"gh"}},
		{"api.github.com", http.Header{}, http.Header{"Authorization": {"Bearer gh-real"}}, []string{"gh"}},
		// Bound elsewhere: placeholders pass as they are.
		{"github.com", http.Header{"Authorization": {"Bearer " + Placeholder("gh")}},
			http.Header{"Authorization": {"Bearer " + Placeholder("gh")}}, nil},
		{"evil.test", http.Header{"X-G": {Placeholder("g")}, "Private-Token": {Placeholder("gl")}},
			http.Header{"X-G": {Placeholder("g")}, "Private-Token": {Placeholder("gl")}}, nil},
		{"gitlab.com", http.Header{}, http.Header{}, nil},
		{"x.gitlab.com", http.Header{"X-Keep": {Placeholder("gh")}},
			http.Header{"X-Keep": {Placeholder("gh")}, "Private-Token": {"gl-real"}}, []string{"gl"}},
		{"api.github.com.evil.test", http.Header{}, http.Header{}, nil},
	}
	for _, tt := range tests {
		h := tt.in.Clone()
		used := inject(h, tt.host, secrets)
		if fmt.Sprint(h) != fmt.Sprint(tt.want) || fmt.Sprint(used) != fmt.Sprint(tt.used) {
			t.Errorf("inject(%v, %s) = %v, %v; want %v, %v", tt.in, tt.host, h, used, tt.want, tt.used)
		}
	}
}
