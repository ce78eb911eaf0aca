package policy

import "slices"

// BuiltinProtectedNames returns the built-in list with the tool and the
// reason for each pattern (a copy).
func BuiltinProtectedNames() []ProtectedName { return slices.Clone(builtinNames) }
