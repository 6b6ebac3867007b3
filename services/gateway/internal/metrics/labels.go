package metrics

import (
	"strconv"

	"github.com/ellipsis-chat/ellipsis/shared/protocol"
)

// Label values a client (or anything else outside the gateway) can choose
// are mapped to fixed sets, so no peer can create new time series: every
// value outside a set is counted as [LabelOther]. Prometheus keeps one
// series per label value for the life of the process ("Use labels",
// prometheus.io/docs/practices/naming), so one client sending a million
// close codes or frame types would otherwise exhaust the gateway's memory
// and the monitoring system's.
//
// The sets: frames_in_total{type} the client frame types of docs/protocol.md
// plus "invalid" and "binary"; frames_out_total{type} the server frame
// types; errors_total{code} docs/protocol.md's error codes;
// commands_published_total{op} the command ops; closes_total{code} the close
// codes of RFC 6455 section 7.4.1 and the IANA registry's 1000–1015
// (1004 reserved) — a client's 3000–4999 application codes are "other".
const LabelOther = "other"

// Frame-type labels of frames_in_total beyond the protocol's types.
const (
	FrameInvalid = "invalid" // not JSON, bad field or unknown type
	FrameBinary  = "binary"  // a binary message (closed with 1003)
)

var (
	frameInTypes = labelSet(protocol.TypeJoin, protocol.TypeLeave, protocol.TypeTypingStart,
		protocol.TypeTypingStop, protocol.TypeSync, protocol.TypePing, protocol.TypeWatch, protocol.TypeUnwatch, FrameInvalid, FrameBinary)
	frameOutTypes = labelSet(protocol.TypeJoined, protocol.TypeLeft, protocol.TypeTypingStart,
		protocol.TypeTypingStop, protocol.TypeTyping, protocol.TypePong, protocol.TypeError,
		protocol.TypeWatching, protocol.TypeUnwatched, protocol.TypeSummary)
	errorCodes = labelSet(protocol.CodeBadRequest, protocol.CodeUnknownType, protocol.CodeNotJoined,
		protocol.CodeForbidden, protocol.CodeRoomLimit, protocol.CodeRateLimited, protocol.CodeUnavailable,
		protocol.CodeInternal, protocol.CodeWatchLimit, protocol.CodeTooManyThreads)
	watchRefusalCodes = labelSet(protocol.CodeBadRequest, protocol.CodeForbidden, protocol.CodeWatchLimit,
		protocol.CodeRateLimited, protocol.CodeUnavailable)
	commandOps = labelSet(protocol.OpStart, protocol.OpStop, protocol.OpLeave, protocol.OpDisconnect)
)

// Close codes kept as their own label value: 1000..1015 but 1004.
const (
	minCloseLabel = 1000
	maxCloseLabel = 1015
)

// closeLabels holds the label of every close code in
// minCloseLabel..maxCloseLabel ("" for 1004, reserved).
var closeLabels = func() (l [maxCloseLabel - minCloseLabel + 1]string) {
	for c := minCloseLabel; c <= maxCloseLabel; c++ {
		if c != 1004 {
			l[c-minCloseLabel] = strconv.Itoa(c)
		}
	}
	return l
}()

func labelSet(vs ...string) map[string]struct{} {
	m := make(map[string]struct{}, len(vs))
	for _, v := range vs {
		m[v] = struct{}{}
	}
	return m
}

// bounded returns v when set holds it, [LabelOther] otherwise.
func bounded(set map[string]struct{}, v string) string {
	if _, ok := set[v]; ok {
		return v
	}
	return LabelOther
}

// CloseLabel is the closes_total label of a WebSocket close code: its
// decimal value for 1000..1015 (but 1004), [LabelOther] for any other.
func CloseLabel(code int) string {
	if code >= minCloseLabel && code <= maxCloseLabel {
		if l := closeLabels[code-minCloseLabel]; l != "" {
			return l
		}
	}
	return LabelOther
}
