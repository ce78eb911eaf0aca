package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
	"github.com/agentbox/agentbox/internal/agent"
	"github.com/agentbox/agentbox/internal/engine"
)

// Inputs and outputs of the operations. Bodies are the wire types of package
// client; the OpenAPI document's schemas are derived from them, and the
// validator enforces those (operation.go).

// The session ID path parameter. Each input repeats this field rather than
// embedding it, as the document has always described it.
type sessionPath struct {
	ID string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
}

type healthOutput struct{ Body client.Health }

type agentsOutput struct{ Body client.AgentList }

type agentInput struct {
	Name string `path:"name" minLength:"1" maxLength:"128" doc:"Agent name."`
}

type agentOutput struct{ Body client.AgentDetail }

type updateSessionInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Body client.UpdateSession
}

type createSessionInput struct{ Body client.CreateSession }

type createdOutput struct {
	Location string `header:"Location" doc:"URL of the new session."`
	Body     client.Session
}

type sessionOutput struct{ Body client.Session }

type resumeInput struct {
	ID   string                `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Body *client.ResumeSession `required:"false"`
}

type listSessionsInput struct {
	Status string `query:"status" enum:"starting,idle,running,ended,failed,interrupted,stopped,paused" doc:"Only sessions in this state."`
	Limit  int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
	Before string `query:"before" maxLength:"128" doc:"Only sessions created before this session ID (next_before of the previous page)."`
}

type sessionsOutput struct{ Body client.SessionList }

type deleteSessionInput struct {
	ID    string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Purge bool   `query:"purge" doc:"Also delete the session's event log and requests."`
}

type sendMessageInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	Body client.SendMessage
}

// check enforces what the schema cannot: exactly one of text and content,
// and known content part types.
func (in *sendMessageInput) check() []error {
	m := in.Body
	if (m.Text == "") == (len(m.Content) == 0) {
		return []error{&fieldError{Location: "body", Message: "exactly one of text and content must be set"}}
	}
	var errs []error
	for i, p := range m.Content {
		loc := "body.content[" + strconv.Itoa(i) + "]"
		switch p.Type {
		case event.PartText:
			if p.Text == "" {
				errs = append(errs, &fieldError{Location: loc + ".text", Message: "a text part needs text"})
			}
		case event.PartImage, event.PartFile:
			if p.Data == "" && p.URI == "" && p.Path == "" {
				errs = append(errs, &fieldError{Location: loc, Message: "an image or file part needs data, uri or path"})
			}
		default:
			errs = append(errs, &fieldError{Location: loc + ".type", Message: "expected one of text, image, file", Value: string(p.Type)})
		}
	}
	return errs
}

type turnOutput struct{ Body client.Turn }

type permissionInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	PID  string `path:"pid" minLength:"1" maxLength:"128" doc:"Permission request ID."`
	Body client.PermissionAnswer
}

type questionInput struct {
	ID   string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	QID  string `path:"qid" minLength:"1" maxLength:"128" doc:"Question ID."`
	Body client.QuestionAnswer
}

// check requires an answer, an option or a cancel, and not a cancel with
// an answer.
func (in *questionInput) check() []error {
	a := in.Body
	answered := a.Answer != "" || a.OptionID != ""
	if a.Cancel == answered {
		return []error{&fieldError{Location: "body", Message: "set answer or option_id, or cancel alone"}}
	}
	return nil
}

type resolvedOutput struct{ Body client.Resolved }

type requestsInput struct {
	ID    string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	State string `query:"state" enum:"pending,resolved" doc:"Only requests in this state."`
}

type requestsOutput struct{ Body client.RequestList }

type eventsInput struct {
	ID    string `path:"id" minLength:"1" maxLength:"128" doc:"Session ID."`
	After int64  `query:"after" minimum:"0" doc:"Return events with seq greater than this (next_after of the previous page)."`
	Limit int    `query:"limit" minimum:"1" maximum:"1000" default:"100" doc:"Page size."`
}

type eventsOutput struct{ Body client.EventPage }

// Errors every authenticated operation may answer.
var commonErrors = []int{http.StatusUnauthorized, http.StatusUnprocessableEntity, http.StatusInternalServerError}

func errs(codes ...int) []int { return append(codes, commonErrors...) }

// operations is the API: every operation the daemon serves, as the
// OpenAPI document describes it (operation.go). Built on first use (the
// server's routes, the document), not by the package's init: it was the
// largest init of ours, run before main at every start of the binary (a
// client command's too).
var operations = sync.OnceValue(func() []route {
	return slices.Concat(sessionOps(), execOps(), networkOps(), filesOps(), diffOps(), sessionExecOps(), sessionProcOps(), providerOps())
})

func sessionOps() []route {
	return []route{
		&op[struct{}, healthOutput]{h: (*server).health, opSpec: opSpec{
			ID: "getHealth", Method: http.MethodGet, Path: "/v1/health", Tag: "system",
			Summary:     "Daemon health",
			Description: "Answers as long as the daemon serves requests. Needs no token.",
			Public:      true,
			Errors:      []int{http.StatusInternalServerError},
		}},

		&op[struct{}, agentsOutput]{h: (*server).agents, opSpec: opSpec{
			ID: "listAgents", Method: http.MethodGet, Path: "/v1/agents", Tag: "agents",
			Summary: "List agents", Description: "Every agent the daemon knows, with its capabilities and whether it can run here.",
			Errors: errs(),
		}},

		&op[agentInput, agentOutput]{h: (*server).agent, opSpec: opSpec{
			ID: "getAgent", Method: http.MethodGet, Path: "/v1/agents/{name}", Tag: "agents",
			Summary: "Get an agent with its models and modes",
			Description: "The agent as in the list, with the models and modes it offers (capability model_list) in its own words: " +
				"the lists its latest session announced in session.started, and the defaults it picked for a session that asked for none. " +
				"Before a session of the agent has started here there are no lists (catalog_note says why); the daemon never makes one up. " +
				"Once known, a create or update naming a model or mode not on the list answers 422 (unknown-model, unknown-mode) before any process starts.",
			Errors: errs(http.StatusNotFound),
		}},

		&op[createSessionInput, createdOutput]{h: (*server).createSession, opSpec: opSpec{
			ID: "createSession", Method: http.MethodPost, Path: "/v1/sessions", Tag: "sessions",
			Summary: "Start a session",
			Description: "Starts an agent session. The session is usable once its status leaves starting; follow its events. " +
				"Answers 429 (too-many-live-sessions, with Retry-After) when as many sessions have a live agent process as the daemon allows.",
			Status: http.StatusCreated,
			Errors: errs(http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
				http.StatusTooManyRequests, http.StatusServiceUnavailable),
		}},

		&op[listSessionsInput, sessionsOutput]{h: (*server).listSessions, opSpec: opSpec{
			ID: "listSessions", Method: http.MethodGet, Path: "/v1/sessions", Tag: "sessions",
			Summary: "List sessions", Description: "Sessions newest first, paged with before.",
			Errors: errs(),
		}},

		&op[sessionPath, sessionOutput]{h: (*server).getSession, opSpec: opSpec{
			ID: "getSession", Method: http.MethodGet, Path: "/v1/sessions/{id}", Tag: "sessions",
			Summary: "Get a session",
			Errors:  errs(http.StatusNotFound),
		}},

		&op[updateSessionInput, sessionOutput]{h: (*server).updateSession, opSpec: opSpec{
			ID: "updateSession", Method: http.MethodPatch, Path: "/v1/sessions/{id}", Tag: "sessions",
			Summary: "Change a session's model or mode",
			Description: "Changes the model and/or mode (an empty one stays) from the next turn on, between turns only: during a turn it answers 409 (busy); " +
				"wait for turn.completed or interrupt the turn, then send it again. A live agent takes the change natively before the answer " +
				"(capabilities model_switch, mode_switch; otherwise 422 switch-unsupported, also when the agent refuses); a session without a live agent " +
				"records it and its resume starts with it. A model or mode not on the list the agent announced answers 422 (unknown-model, unknown-mode). " +
				"The change is recorded as a session.configured event and stored with the session.",
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
				http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusServiceUnavailable),
		}},

		&op[deleteSessionInput, struct{}]{h: (*server).deleteSession, opSpec: opSpec{
			ID: "deleteSession", Method: http.MethodDelete, Path: "/v1/sessions/{id}", Tag: "sessions",
			Summary:     "End a session",
			Description: "Terminates the session's agent if it is live. With purge, also deletes its event log.",
			Status:      http.StatusNoContent,
			Errors:      errs(http.StatusNotFound),
		}},

		&op[sendMessageInput, turnOutput]{h: (*server).sendMessage, opSpec: opSpec{
			ID: "sendMessage", Method: http.MethodPost, Path: "/v1/sessions/{id}/messages", Tag: "sessions",
			Summary: "Send a message",
			Description: "Starts a turn with the message and returns its ID at once; the turn's progress arrives as events. Exactly one of text and content must be set. " +
				"A content part of a type the session's agent does not accept (its images and files capabilities) refuses the whole message " +
				"with 422 (unsupported-content, naming the part). " +
				"A session whose idle agent was stopped (status stopped) is resumed first (session.started with resumed true), " +
				"which may answer 429 (too-many-live-sessions, with Retry-After), or 422 (env-required) when it was created with env " +
				"the daemon no longer has (after a restart): resume it with that env.",
			Status: http.StatusAccepted,
			Limit:  limitMessage,
			// Large bodies (inline images) may come slowly.
			ReadTimeout: 30 * time.Second,
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
				http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusTooManyRequests, http.StatusServiceUnavailable),
		}},

		&op[resumeInput, sessionOutput]{h: (*server).resumeSession, opSpec: opSpec{
			ID: "resumeSession", Method: http.MethodPost, Path: "/v1/sessions/{id}/resume", Tag: "sessions",
			Summary: "Resume a session",
			Description: "Starts a new agent process for a session that is not live (interrupted by a daemon restart, ended, failed, stopped or paused), " +
				"continuing the agent's own conversation; session.started with resumed true follows. Needs an agent with the resume capability. " +
				"A paused session's sandbox is resumed; a session on a provider whose sandbox was lost runs on a fresh sandbox made from the " +
				"snapshot its loss kept (422 provider-unsupported on a provider without snapshots). " +
				"A live session answers 409 (live): send it messages directly. Answers 429 (too-many-live-sessions, with Retry-After) " +
				"when as many sessions have a live agent process as the daemon allows. The env given at create is never stored (only its names): " +
				"a resume without a variable the create had answers 422 (env-required) naming every one to send, " +
				"unless the daemon holds it itself (its own environment for the agent's model API, or a secret the session's policy declares).",
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
				http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType, http.StatusTooManyRequests, http.StatusServiceUnavailable),
		}},

		&op[sessionPath, sessionOutput]{h: (*server).pauseSession, opSpec: opSpec{
			ID: "pauseSession", Method: http.MethodPost, Path: "/v1/sessions/{id}/pause", Tag: "sessions",
			Summary: "Pause a session on a provider",
			Description: "Pauses the sandbox of a live session on a provider whose sandboxes pause (capability pause_resume, e.g. docker): " +
				"its agent is frozen with its memory and files, session.ended with reason paused follows and the status is paused. " +
				"Its next message resumes it (or POST /v1/sessions/{id}/resume), with session.started resumed true. " +
				"Pausing a paused session returns it. A turn running, a request waiting for an answer or a command running answers 409 (busy); " +
				"a session on this host or on a provider that cannot pause answers 409 (not-pausable); one that is not live, 409 (not-live). " +
				"serve --provider-idle-pause pauses idle sessions by itself.",
			Errors: errs(http.StatusNotFound, http.StatusConflict, http.StatusBadGateway, http.StatusServiceUnavailable),
		}},

		&op[sessionPath, turnOutput]{h: (*server).interrupt, opSpec: opSpec{
			ID: "interruptTurn", Method: http.MethodPost, Path: "/v1/sessions/{id}/interrupt", Tag: "sessions",
			Summary:     "Interrupt the running turn",
			Description: "Asks the agent to stop the running turn and returns its ID; turn.completed with stop_reason interrupted follows.",
			Status:      http.StatusAccepted,
			Errors:      errs(http.StatusNotFound, http.StatusConflict),
		}},

		&op[permissionInput, resolvedOutput]{h: (*server).answerPermission, opSpec: opSpec{
			ID: "answerPermission", Method: http.MethodPost, Path: "/v1/sessions/{id}/permissions/{pid}", Tag: "requests",
			Summary:     "Answer a permission request",
			Description: "Settles one pending permission.requested; returns the permission.resolved event as stored.",
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
				http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType),
		}},

		&op[questionInput, resolvedOutput]{h: (*server).answerQuestion, opSpec: opSpec{
			ID: "answerQuestion", Method: http.MethodPost, Path: "/v1/sessions/{id}/questions/{qid}", Tag: "requests",
			Summary:     "Answer a question",
			Description: "Answers (or declines) one pending question.requested; returns the question.resolved event as stored.",
			Errors: errs(http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
				http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType),
		}},

		&op[requestsInput, requestsOutput]{h: (*server).listRequests, opSpec: opSpec{
			ID: "listRequests", Method: http.MethodGet, Path: "/v1/sessions/{id}/requests", Tag: "requests",
			Summary: "List permission and question requests", Description: "In creation order.",
			Errors: errs(http.StatusNotFound),
		}},

		&op[eventsInput, eventsOutput]{h: (*server).listEvents, opSpec: opSpec{
			ID: "listEvents", Method: http.MethodGet, Path: "/v1/sessions/{id}/events", Tag: "events",
			Summary:     "Read a session's events",
			Description: "A page of the session's event log in seq order. Continue with after=next_after while has_more.",
			Errors:      errs(http.StatusNotFound),
		}},

		streamEventsOp,
	}
}

func (s *server) fail(ctx context.Context, err error) error { return errorProblem(ctx, err) }

func (s *server) health(context.Context, *struct{}) (*healthOutput, error) {
	return &healthOutput{Body: client.Health{
		Status:        "ok",
		Version:       s.cfg.Version,
		SchemaVersion: event.SchemaVersion,
		UptimeMS:      time.Since(s.cfg.Started).Milliseconds(),
	}}, nil
}

func (s *server) agents(ctx context.Context, _ *struct{}) (*agentsOutput, error) {
	infos := s.eng.Agents(ctx)
	out := make([]client.Agent, len(infos))
	for i, in := range infos {
		out[i] = toAgent(in)
	}
	return &agentsOutput{Body: client.AgentList{Agents: out}}, nil
}

func (s *server) agent(ctx context.Context, in *agentInput) (*agentOutput, error) {
	info, cat, err := s.eng.AgentCatalog(ctx, in.Name)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &agentOutput{Body: toAgentDetail(info, cat)}, nil
}

func (s *server) updateSession(ctx context.Context, in *updateSessionInput) (*sessionOutput, error) {
	ss, err := s.eng.Configure(ctx, in.ID, in.Body.Model, in.Body.Mode)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &sessionOutput{Body: s.toSession(ss)}, nil
}

func (s *server) createSession(ctx context.Context, in *createSessionInput) (*createdOutput, error) {
	ss, err := s.eng.Create(ctx, toCreateParams(in.Body))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &createdOutput{Location: "/v1/sessions/" + url.PathEscape(ss.ID), Body: s.toSession(ss)}, nil
}

func (s *server) listSessions(ctx context.Context, in *listSessionsInput) (*sessionsOutput, error) {
	list, err := s.eng.List(ctx, engine.ListOptions{Status: engine.Status(in.Status), Limit: in.Limit + 1, Before: in.Before})
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	var out client.SessionList
	if len(list) > in.Limit {
		list = list[:in.Limit]
		out.NextBefore = list[len(list)-1].ID
	}
	out.Sessions = make([]client.Session, len(list))
	for i, ss := range list {
		out.Sessions[i] = s.toSession(ss)
	}
	return &sessionsOutput{Body: out}, nil
}

func (s *server) getSession(ctx context.Context, in *sessionPath) (*sessionOutput, error) {
	ss, err := s.eng.Get(ctx, in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &sessionOutput{Body: s.toSession(ss)}, nil
}

func (s *server) resumeSession(ctx context.Context, in *resumeInput) (*sessionOutput, error) {
	var env map[string]string
	var mcp []agent.MCPServer
	if in.Body != nil {
		env, mcp = in.Body.Env, toMCPServers(in.Body.MCPServers)
	}
	ss, err := s.eng.Resume(ctx, in.ID, env, mcp...)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &sessionOutput{Body: s.toSession(ss)}, nil
}

func (s *server) deleteSession(ctx context.Context, in *deleteSessionInput) (*struct{}, error) {
	if err := s.eng.Delete(ctx, in.ID, in.Purge); err != nil {
		return nil, s.fail(ctx, err)
	}
	return &struct{}{}, nil
}

func (s *server) sendMessage(ctx context.Context, in *sendMessageInput) (*turnOutput, error) {
	turn, err := s.eng.Send(ctx, in.ID, toContent(in.Body))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &turnOutput{Body: client.Turn{TurnID: turn}}, nil
}

func (s *server) pauseSession(ctx context.Context, in *sessionPath) (*sessionOutput, error) {
	ss, err := s.eng.Pause(ctx, in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &sessionOutput{Body: s.toSession(ss)}, nil
}

func (s *server) interrupt(ctx context.Context, in *sessionPath) (*turnOutput, error) {
	turn, err := s.eng.Interrupt(ctx, in.ID)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &turnOutput{Body: client.Turn{TurnID: turn}}, nil
}

func (s *server) answerPermission(ctx context.Context, in *permissionInput) (*resolvedOutput, error) {
	ev, err := s.eng.AnswerPermission(ctx, in.ID, in.PID, toPermissionAnswer(in.Body))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &resolvedOutput{Body: client.Resolved{Event: ev}}, nil
}

func (s *server) answerQuestion(ctx context.Context, in *questionInput) (*resolvedOutput, error) {
	ev, err := s.eng.AnswerQuestion(ctx, in.ID, in.QID, toAnswer(in.Body))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return &resolvedOutput{Body: client.Resolved{Event: ev}}, nil
}

func (s *server) listRequests(ctx context.Context, in *requestsInput) (*requestsOutput, error) {
	reqs, err := s.eng.Requests(ctx, in.ID, engine.RequestState(in.State))
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	out := make([]client.Request, len(reqs))
	for i, r := range reqs {
		out[i] = toRequest(r)
	}
	return &requestsOutput{Body: client.RequestList{Requests: out}}, nil
}

func (s *server) listEvents(ctx context.Context, in *eventsInput) (*eventsOutput, error) {
	// One more than asked tells whether there is more.
	evs, err := s.eng.Events(ctx, in.ID, in.After, in.Limit+1)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	page := client.EventPage{NextAfter: in.After}
	if len(evs) > in.Limit {
		evs, page.HasMore = evs[:in.Limit], true
	}
	if len(evs) > 0 {
		page.NextAfter = evs[len(evs)-1].Seq
	}
	page.Events = nonNil(evs)
	return &eventsOutput{Body: page}, nil
}
