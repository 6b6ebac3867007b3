package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// OpBatch is the op of a command batch (docs/protocol.md, "Command
// batches"): {"v":1,"op":"batch","cmds":[<command>,...]} on the command
// subject, the commands in the order the sender published them.
const OpBatch = "batch"

// MaxBatchCommands bounds the commands of one batch a worker takes: a
// batch with more is refused whole (field "cmds"). A gateway sends at most
// its own, smaller, count bound per batch, and never more bytes than the
// NATS server's max_payload.
const MaxBatchCommands = 4096

// batchHead and batchTail frame a batch as [AppendBatchHead] writes it;
// DecodeCommands splits such a payload without reflection.
const (
	batchHead = `{"v":1,"op":"batch","cmds":[`
	batchTail = `]}`
)

// BatchOverhead is the bytes a batch adds to its commands: the head, the
// tail and one comma between each two commands (count−1 of them).
const BatchOverhead = len(batchHead) + len(batchTail)

// AppendBatchHead appends the start of a batch to dst. The sender then
// appends each command (AppendCommand), separated by ',', and closes the
// batch with [AppendBatchTail].
func AppendBatchHead(dst []byte) []byte { return append(dst, batchHead...) }

// AppendBatchTail closes a batch begun with [AppendBatchHead].
func AppendBatchTail(dst []byte) []byte { return append(dst, batchTail...) }

// DecodeCommands parses a payload of the command subject: one command, or
// a batch of them. For a single command it returns it (cmds of length 1)
// or its error as err, exactly as [DecodeCommand]. For a batch it returns
// one entry of cmds and of errs per element of "cmds", in order: errs[i]
// is nil for a valid command, else the *FieldError that [DecodeCommand]
// gives it (cmds[i] is then the zero Command), so one invalid element
// costs only itself. err (a *FieldError) refuses the whole payload:
// malformed JSON (field "json"), a "v" other than 1 (field "v"), or
// "cmds" missing, not an array of objects, empty or longer than
// [MaxBatchCommands] (field "cmds"). A batch inside a batch is an invalid
// element (field "op").
func DecodeCommands(data []byte) (cmds []Command, errs []error, err error) {
	if elems, ok := splitBatch(data); ok {
		return decodeElems(elems)
	}
	if c, ok := scanCommand(data); ok && c.Op != OpBatch { // a gateway's single command
		if err := c.Validate(); err != nil {
			return nil, nil, err
		}
		return []Command{c}, []error{nil}, nil
	}
	return decodeCommandsJSON(data)
}

// decodeCommandsJSON is DecodeCommands for any JSON layout (spaces, other
// field orders): encoding/json reads the envelope.
func decodeCommandsJSON(data []byte) ([]Command, []error, error) {
	var head struct {
		V  int    `json:"v"`
		Op string `json:"op"`
	}
	if json.Unmarshal(data, &head) != nil || head.Op != OpBatch {
		// Not a batch (or not JSON): the single-command decoder says why.
		c, err := DecodeCommand(data)
		if err != nil {
			return nil, nil, err
		}
		return []Command{c}, []error{nil}, nil
	}
	if head.V != Version {
		return nil, nil, &FieldError{"v", fmt.Sprintf("must be %d, got %d", Version, head.V)}
	}
	var env struct {
		Cmds []json.RawMessage `json:"cmds"`
	}
	if json.Unmarshal(data, &env) != nil {
		return nil, nil, &FieldError{"cmds", "must be an array of command objects"}
	}
	elems := make([][]byte, len(env.Cmds))
	for i, r := range env.Cmds {
		elems[i] = r
	}
	return decodeElems(elems)
}

// decodeElems decodes a batch's elements, each on its own.
func decodeElems(elems [][]byte) ([]Command, []error, error) {
	if len(elems) == 0 {
		return nil, nil, &FieldError{"cmds", "must hold 1 or more commands"}
	}
	if len(elems) > MaxBatchCommands {
		return nil, nil, &FieldError{"cmds", fmt.Sprintf("holds %d commands, at most %d allowed", len(elems), MaxBatchCommands)}
	}
	cmds := make([]Command, len(elems))
	errs := make([]error, len(elems))
	for i, e := range elems {
		cmds[i], errs[i] = DecodeCommand(e)
	}
	return cmds, errs, nil
}

// splitBatch splits a batch written as AppendBatchHead writes it (no
// spaces, fields in that order) into its elements, each a JSON object
// whose braces balance outside strings, without reflection. ok is false
// for anything else (then the general decoder decides), and for more
// elements than MaxBatchCommands.
func splitBatch(data []byte) (elems [][]byte, ok bool) {
	if !bytes.HasPrefix(data, []byte(batchHead)) || !bytes.HasSuffix(data, []byte(batchTail)) || len(data) < BatchOverhead {
		return nil, false
	}
	body := data[len(batchHead) : len(data)-len(batchTail)]
	for i := 0; i < len(body); {
		end, ok := objectEnd(body, i)
		if !ok || len(elems) == MaxBatchCommands {
			return nil, false
		}
		elems = append(elems, body[i:end])
		i = end
		if i < len(body) {
			if body[i] != ',' || i+1 == len(body) {
				return nil, false
			}
			i++
		}
	}
	return elems, len(elems) > 0
}

// objectEnd returns the index just past the JSON object that starts at
// b[i] ('{'), counting braces outside strings (a backslash escapes the
// next byte inside one). Whether the object is valid JSON is for
// DecodeCommand to say; this only finds where it ends.
func objectEnd(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '{' {
		return 0, false
	}
	depth, inStr := 0, false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case inStr:
			switch c {
			case '\\':
				i++
			case '"':
				inStr = false
			}
		case c == '"':
			inStr = true
		case c == '{':
			depth++
		case c == '}':
			depth--
			if depth == 0 {
				return i + 1, true
			}
		}
	}
	return 0, false
}
