package files

// Change is one change a watch saw: Op is "create", "write", "remove" or
// "rename" (a rename is reported for its old path and its new one).
type Change struct {
	Path string
	Op   string
}

// Change operations.
const (
	OpCreate = "create"
	OpWrite  = "write"
	OpRemove = "remove"
	OpRename = "rename"
)

// ours reports whether name is one of the temporary entries the package
// makes (a write's new file, an archive's staging directory), which a
// watch does not report.
func ours(name string) bool {
	return len(name) > len(".agentbox-") && name[:len(".agentbox-")] == ".agentbox-"
}
