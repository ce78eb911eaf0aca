// Package client is the Go SDK for the agentbox HTTP/SSE API: typed calls for
// every endpoint and an event iterator that follows a session's SSE stream,
// reconnecting and resuming by seq so no event is lost or repeated.
//
// A typical program creates a session, sends a message and follows the turn:
//
//	c, err := client.New("http://127.0.0.1:7777", client.WithToken(token))
//	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "claude"})
//	turn, err := c.Send(ctx, s.ID, "fix the failing test")
//	done, err := c.WaitTurn(ctx, s.ID, turn.TurnID, 0, func(ev event.Event) error {
//		fmt.Println(ev.Seq, ev.Type)
//		return nil
//	})
//
// Failures the daemon reports are *APIError values carrying the problem+json
// document; classify them with IsNotFound, IsBusy and the other helpers, or
// ProblemKind. A daemon listening on a unix socket is reached with a base URL
// of the form unix:///path/to.sock.
package client
