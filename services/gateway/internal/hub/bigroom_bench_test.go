package hub

import (
	"context"
	"strconv"
	"testing"

	"github.com/ellipsis-chat/ellipsis/shared/names"
	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// BenchmarkBigRoom: issue 25's big room on one gateway, 10,000 local
// members and 200 typists toggling at 0.5 changes/s each (100 events/s),
// through the hub's real fanOut, with and without summary mode. Members
// only count (countMember), so this is the hub's CPU per event; one
// simulated second is 100 events, and in summary mode every 100 events are
// followed by the interval's summary (summarizeRoom: one snapshot of 100
// typists from a fake backend, encoded once plus once per listed typist,
// written to every member).
//
//	cd services/gateway && go test -run '^$' -bench BigRoom -benchmem ./internal/hub
//
// Reported: frames/member/s (frames written to one member per simulated
// second) and ns/event (wall time per room event, the summaries
// included). Compare the two modes' ns/event as a ratio: the machine is
// noisy.
func BenchmarkBigRoom(b *testing.B) {
	const (
		members         = 10000
		typists         = 200
		eventsPerSecond = typists / 2 // 0.5 changes/s each
	)
	nm := names.New("bench:", "bench")
	channel := nm.RoomChannel("r")
	payloads := make([]string, 2*typists) // [2i] start, [2i+1] stop of typist i
	for i := 0; i < typists; i++ {
		u := "t" + strconv.Itoa(i)
		payloads[2*i] = string(protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStart, Room: "r", User: u, Name: "Typist " + u, TTLMs: 5000})) + "1}"
		payloads[2*i+1] = string(protocol.RoomEventPrefix(protocol.RoomEvent{Type: protocol.TypeTypingStop, Room: "r", User: u, Reason: protocol.ReasonStopped})) + "1}"
	}
	for _, summary := range []bool{false, true} {
		name := "mode=events"
		if summary {
			name = "mode=summary"
		}
		b.Run(name+"/members=10000/typists=200", func(b *testing.B) {
			ms := make([]Member, members)
			for i := range ms {
				ms[i] = &countMember{user: "u" + strconv.Itoa(i)}
			}
			h := benchHub(b, ms)
			h.flights = newFlights(hundredTyping{}, h.opts.ReadyTimeout, h.met)
			if summary {
				rm := h.lookup("r")
				rm.mode = modeSummary
				rm.mu.Unlock()
			}
			var events int
			b.ReportAllocs()
			for b.Loop() {
				t := events % typists
				stop := (events/typists)%2 == 1
				p := payloads[2*t]
				if stop {
					p = payloads[2*t+1]
				}
				h.fanOut(channel, p)
				events++
				if summary && events%eventsPerSecond == 0 {
					h.summarizeRoom("r")
				}
			}
			seconds := float64(events) / eventsPerSecond
			got := ms[0].(*countMember).n
			b.ReportMetric(float64(got)/seconds, "frames/member/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
			if summary && events >= eventsPerSecond && got == 0 {
				b.Fatal("no summary written in summary mode")
			}
		})
	}
}

// hundredTyping is a Backend whose every room has 100 typists listed (the
// default ELLIPSIS_SNAPSHOT_MAX) of 200.
type hundredTyping struct{}

func (hundredTyping) Snapshot(context.Context, string) (protocol.Snapshot, error) {
	users := make([]protocol.Typist, 100)
	for i := range users {
		users[i] = protocol.Typist{User: "t" + strconv.Itoa(i), Name: "Typist t" + strconv.Itoa(i)}
	}
	return protocol.Snapshot{Users: users, Total: 200}, nil
}
