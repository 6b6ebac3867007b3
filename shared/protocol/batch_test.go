package protocol

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// appendBatch is how a gateway writes a batch: head, commands, tail.
func appendBatch(t testing.TB, cmds []Command) []byte {
	t.Helper()
	b := AppendBatchHead(nil)
	for i := range cmds {
		if i > 0 {
			b = append(b, ',')
		}
		var err error
		if b, err = AppendCommand(b, &cmds[i]); err != nil {
			t.Fatal(err)
		}
	}
	return AppendBatchTail(b)
}

func batchCmds() []Command {
	return []Command{
		{V: 1, Op: OpStart, Room: "42", User: "alice", Name: "Alice", Conn: "gw-a:1", Seq: 1, TsMs: 1764480000000},
		{V: 1, Op: OpStop, Room: "42", User: "alice", Conn: "gw-a:1", Seq: 2, TsMs: 1764480000001},
		{V: 1, Op: OpDisconnect, Rooms: []string{"42", "{x}"}, User: "bob", Conn: "gw-a:2", Seq: 9},
		{V: 1, Op: OpStart, Room: "<r>", Thread: "t\"1", User: "b\\ot", Conn: "gw-a:3", Activity: "thinking"},
	}
}

func TestDecodeCommandsBatchInOrder(t *testing.T) {
	want := batchCmds()
	data := appendBatch(t, want)
	cmds, errs, err := DecodeCommands(data)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("element %d: %v", i, e)
		}
	}
	if !reflect.DeepEqual(cmds, want) {
		t.Fatalf("got %+v\nwant %+v", cmds, want)
	}
	// The same batch with spaces and another field order: encoding/json's path.
	var raw []json.RawMessage
	for i := range want {
		b, _ := json.Marshal(want[i])
		raw = append(raw, b)
	}
	loose, _ := json.MarshalIndent(map[string]any{"cmds": raw, "op": "batch", "v": 1}, "", "  ")
	cmds, _, err = DecodeCommands(loose)
	if err != nil || !reflect.DeepEqual(cmds, want) {
		t.Fatalf("loose batch: %v, %+v", err, cmds)
	}
}

func TestDecodeCommandsSingle(t *testing.T) {
	c := batchCmds()[0]
	data, _ := AppendCommand(nil, &c)
	cmds, errs, err := DecodeCommands(data)
	if err != nil || len(cmds) != 1 || errs[0] != nil || !reflect.DeepEqual(cmds[0], c) {
		t.Fatalf("single: %v %v %+v", err, errs, cmds)
	}
	_, _, err = DecodeCommands([]byte(`{"v":1,"op":"start","room":"42"}`))
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "user" {
		t.Fatalf("invalid single: %v", err)
	}
}

// One invalid element costs only itself; the others keep their order.
func TestDecodeCommandsInvalidElement(t *testing.T) {
	for name, bad := range map[string]string{
		"missing user": `{"v":1,"op":"start","room":"42","conn":"c"}`,
		"nested batch": `{"v":1,"op":"batch","cmds":[{"v":1,"op":"stop","room":"1","user":"u"}]}`,
		"not json":     `{"v":1,"op":"start",,}`,
	} {
		t.Run(name, func(t *testing.T) {
			good := batchCmds()
			a, _ := AppendCommand(nil, &good[0])
			b, _ := AppendCommand(nil, &good[1])
			data := []byte(batchHead + string(a) + "," + bad + "," + string(b) + batchTail)
			cmds, errs, err := DecodeCommands(data)
			if err != nil {
				t.Fatal(err)
			}
			if len(cmds) != 3 || errs[0] != nil || errs[2] != nil || errs[1] == nil {
				t.Fatalf("errs %v", errs)
			}
			if !reflect.DeepEqual(cmds[0], good[0]) || !reflect.DeepEqual(cmds[2], good[1]) {
				t.Fatalf("valid elements changed: %+v", cmds)
			}
		})
	}
}

func TestDecodeCommandsRefused(t *testing.T) {
	many := strings.Repeat(`{"v":1,"op":"stop","room":"1","user":"u"},`, MaxBatchCommands)
	for data, field := range map[string]string{
		`{"v":1,"op":"batch","cmds":[]}`:                                           "cmds",
		`{"v":1,"op":"batch"}`:                                                     "cmds",
		`{"v":1,"op":"batch","cmds":"x"}`:                                          "cmds",
		`{"v":2,"op":"batch","cmds":[{}]}`:                                         "v",
		`{"v":1,"op":"batch","cmds":[{"v":1}`:                                      "json",
		batchHead + many + `{"v":1,"op":"stop","room":"1","user":"u"}` + batchTail: "cmds",
	} {
		_, _, err := DecodeCommands([]byte(data))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			short := data
			if len(short) > 60 {
				short = short[:60]
			}
			t.Errorf("%s: got %v, want field %s", short, err, field)
		}
	}
}

// FuzzDecodeCommands: the batch decoder never panics, returns one result
// per element, accepts only valid commands, reads a valid JSON payload as
// encoding/json does, and a batch of its accepted commands written as a
// gateway writes it decodes to the same commands.
func FuzzDecodeCommands(f *testing.F) {
	f.Add(appendBatch(f, batchCmds()))
	f.Add([]byte(`{"v":1,"op":"stop","room":"42","user":"alice"}`))
	f.Add([]byte(`{"v":1,"op":"batch","cmds":[{"v":1,"op":"stop","room":"1","user":"u"},{"v":1,"op":"x"}]}`))
	f.Add([]byte(`{ "op":"batch", "v":1, "cmds":[ {"user":"u","v":1,"op":"stop","room":"1"} ] }`))
	f.Add([]byte(`{"v":1,"op":"batch","cmds":[{"v":1,"name":"}\"{","op":"stop","room":"1","user":"u"}]}`))
	f.Add([]byte(`{"v":1,"op":"batch","cmds":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmds, errs, err := DecodeCommands(data)
		if err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		if len(cmds) != len(errs) || len(cmds) == 0 || len(cmds) > MaxBatchCommands {
			t.Fatalf("%d commands, %d errors", len(cmds), len(errs))
		}
		var ok []Command
		for i := range cmds {
			if errs[i] != nil {
				if _, isFE := errs[i].(*FieldError); !isFE {
					t.Fatalf("element error of type %T", errs[i])
				}
				continue
			}
			if err := cmds[i].Validate(); err != nil {
				t.Fatalf("accepted invalid command %d: %v", i, err)
			}
			if len(cmds[i].Rooms) == 0 {
				cmds[i].Rooms = nil
			}
			ok = append(ok, cmds[i])
		}
		if json.Valid(data) {
			slow, slowErrs, serr := decodeCommandsJSON(data)
			if serr != nil || len(slow) != len(cmds) {
				t.Fatalf("fast and encoding/json paths differ: %v, %d vs %d", serr, len(slow), len(cmds))
			}
			for i := range slow {
				if len(slow[i].Rooms) == 0 {
					slow[i].Rooms = nil
				}
				if (slowErrs[i] == nil) != (errs[i] == nil) || !reflect.DeepEqual(slow[i], cmds[i]) {
					t.Fatalf("element %d: fast %+v %v, encoding/json %+v %v", i, cmds[i], errs[i], slow[i], slowErrs[i])
				}
			}
		}
		if len(ok) == 0 {
			return
		}
		again, againErrs, err := DecodeCommands(appendBatch(t, ok))
		if err != nil {
			t.Fatalf("round trip: %v", err)
		}
		for i := range again {
			if againErrs[i] != nil {
				t.Fatalf("round trip element %d: %v", i, againErrs[i])
			}
			if len(again[i].Rooms) == 0 {
				again[i].Rooms = nil
			}
		}
		if !reflect.DeepEqual(again, ok) {
			t.Fatalf("round trip changed the commands: %+v -> %+v", ok, again)
		}
	})
}

// BenchmarkDecodeCommands64: 64 gateway commands decoded as one batch
// (batch) or as 64 payloads (single); per command.
func BenchmarkDecodeCommands64(b *testing.B) {
	cmds := make([]Command, 64)
	singles := make([][]byte, 64)
	for i := range cmds {
		cmds[i] = Command{V: 1, Op: OpStart, Room: "room-42", User: "alice", Name: "Alice", Conn: "gw-a1b2-5f3c:17", Seq: uint64(i + 1), TsMs: 1764480000000}
		singles[i], _ = AppendCommand(nil, &cmds[i])
	}
	batch := appendBatch(b, cmds)
	b.Run("batch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DecodeCommands(batch); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/cmd")
	})
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, p := range singles {
				if _, _, err := DecodeCommands(p); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/cmd")
	})
}
