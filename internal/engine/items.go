package engine

import (
	"slices"
	"strings"
	"time"

	"github.com/agentbox/agentbox/event"
)

// openItems are the items an agent started and has not completed yet, by
// id: for tool-call durations, and so a turn never ends with an item left
// open. It follows the agent's events only (the engine's own item events
// open and complete in one step); those reach the engine as JSON
// (agent.Host.Emit), so each item event is decoded once, by its type.
type openItems map[string]*openItem

// openItem is an item started and not yet completed, with what its deltas
// said so far.
type openItem struct {
	item         event.Item
	at           time.Time
	text, output strings.Builder
}

// observe follows one of the agent's events. For a tool call it completes
// it returns the call's kind and duration, with done true.
func (o openItems) observe(e event.Event) (kind event.ItemKind, took time.Duration, done bool) {
	switch e.Type {
	case event.TypeItemDelta:
		if len(o) == 0 {
			return "", 0, false
		}
	case event.TypeItemStarted, event.TypeItemCompleted:
	default:
		return "", 0, false
	}
	p, err := e.Decode()
	if err != nil {
		return "", 0, false
	}
	switch p := p.(type) {
	case *event.ItemDelta:
		if it, ok := o[p.ItemID]; ok {
			switch p.Field {
			case event.DeltaText:
				it.text.WriteString(p.Delta)
			case event.DeltaOutput:
				it.output.WriteString(p.Delta)
			}
		}
	case *event.ItemStarted:
		o[p.Item.ID] = &openItem{item: p.Item, at: time.Now()}
	case *event.ItemCompleted:
		it, ok := o[p.Item.ID]
		if !ok {
			return "", 0, false
		}
		delete(o, p.Item.ID)
		switch p.Item.Kind {
		case event.ItemMessage, event.ItemReasoning, event.ItemPlan:
		default:
			return p.Item.Kind, time.Since(it.at), true
		}
	}
	return "", 0, false
}

// close completes, as failed with why, the items the agent started and
// never completed (it died, or an adapter lost track), in the order they
// started, so every item.started has its item.completed before the turn
// ends.
func (o openItems) close(why string) []event.Event {
	items := make([]*openItem, 0, len(o))
	for id, it := range o {
		items = append(items, it)
		delete(o, id)
	}
	slices.SortFunc(items, func(a, b *openItem) int { return a.at.Compare(b.at) })
	evs := make([]event.Event, len(items))
	for i, o := range items {
		it := o.item
		it.Status, it.Error = event.StatusFailed, why
		if o.text.Len() > 0 && it.Text() == "" {
			it.Content = append(it.Content, event.TextPart(o.text.String()))
		}
		if o.output.Len() > 0 && it.Output == "" {
			it.Output = o.output.String()
		}
		evs[i] = event.New(event.SourceDaemon, &event.ItemCompleted{Item: it})
	}
	return evs
}
