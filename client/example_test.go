package client_test

import (
	"context"
	"fmt"
	"log"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/event"
)

func Example() {
	ctx := context.Background()
	c, err := client.New("unix:///run/agentbox.sock", client.WithToken("secret"))
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.CreateSession(ctx, client.CreateSession{Agent: "mock"})
	if err != nil {
		log.Fatal(err)
	}
	turn, err := c.Send(ctx, s.ID, "hello")
	if err != nil {
		log.Fatal(err)
	}
	done, err := c.WaitTurn(ctx, s.ID, turn.TurnID, 0, func(ev event.Event) error {
		if ev.Type != event.TypePermissionRequested {
			return nil
		}
		p, err := ev.Decode()
		if err != nil {
			return err
		}
		_, err = c.AnswerPermission(ctx, s.ID, p.(*event.PermissionRequested).ID, client.PermissionAnswer{Decision: "deny"})
		if client.IsAlreadyResolved(err) {
			return nil // someone else answered first
		}
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.StopReason)
}

func ExampleStream_All() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:7777")
	if err != nil {
		log.Fatal(err)
	}
	// Every event of the session from the start, then live ones, until the
	// session ends; reconnections are invisible here.
	st := c.Stream(ctx, "ses_0190c0ffee0000000000000000000000", 0,
		client.Until(func(ev event.Event) bool { return ev.Type == event.TypeSessionEnded }))
	for ev, err := range st.All() {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.Seq, ev.Type)
	}
}
