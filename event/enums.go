package event

// The closed sets of string values the schema allows, in a stable order. The
// JSON Schema (schema/event.v1.json) takes its enums from these lists, and a
// test checks that each list holds every constant declared for its type, so
// a new constant cannot be forgotten here.

// Plan entry states ([PlanEntry].Status).
const (
	PlanPending    = "pending"
	PlanInProgress = "in_progress"
	PlanCompleted  = "completed"
)

var (
	// Sources lists every event source.
	Sources = []Source{SourceAgent, SourceDaemon}
	// EndReasons lists every session end reason.
	EndReasons = []EndReason{EndCompleted, EndTerminated, EndError, EndInterrupted, EndIdle, EndPaused}
	// StopReasons lists every turn stop reason.
	StopReasons = []StopReason{StopEndTurn, StopMaxTokens, StopInterrupted, StopRefusal, StopError}
	// ItemStatuses lists every item state.
	ItemStatuses = []ItemStatus{StatusInProgress, StatusCompleted, StatusFailed, StatusDeclined}
	// Roles lists every message role.
	Roles = []Role{RoleUser, RoleAssistant, RoleSystem}
	// PartTypes lists every content part type.
	PartTypes = []PartType{PartText, PartImage, PartFile}
	// FileChangeKinds lists every file change kind.
	FileChangeKinds = []FileChangeKind{FileAdd, FileUpdate, FileDelete}
	// PlanStatuses lists every plan entry state.
	PlanStatuses = []string{PlanPending, PlanInProgress, PlanCompleted}
	// DeltaFields lists every field a delta can extend.
	DeltaFields = []DeltaField{DeltaText, DeltaOutput, DeltaInput}
	// PermissionKinds lists every permission kind.
	PermissionKinds = []PermissionKind{PermTool, PermCommand, PermFileWrite, PermNetwork}
	// OptionKinds lists every permission option kind.
	OptionKinds = []OptionKind{OptionAllowOnce, OptionAllowAlways, OptionDenyOnce, OptionDenyAlways}
	// Decisions lists every permission decision.
	Decisions = []Decision{DecisionAllow, DecisionDeny}
	// Deciders lists everyone who can settle a permission or question.
	Deciders = []DecidedBy{ByUser, ByPolicy, ByTimeout, ByDaemon}
	// ViolationKinds lists every sandbox violation kind.
	ViolationKinds = []ViolationKind{ViolationNetwork, ViolationFilesystem, ViolationSyscall, ViolationResource}
	// ViolationActions lists everything the sandbox can do about a violation.
	ViolationActions = []ViolationAction{ActionBlocked, ActionAsked, ActionDropped}
)
