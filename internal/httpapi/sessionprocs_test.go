package httpapi

import "github.com/danielgtaylor/huma/v2"

// The input's check, as huma runs it (Resolver), for the differential test.
func (in *sessionStartInput) Resolve(huma.Context) []error { return in.check() }
