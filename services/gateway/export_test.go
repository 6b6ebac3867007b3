package gateway

import "github.com/ellipsis-chat/ellipsis/services/gateway/internal/session"

// OutboundOf returns the outbound state (session.Conn.Outbound) of every
// open connection of user, for the gateway's tests.
func (s *Server) OutboundOf(user string) []session.Outbound {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []session.Outbound
	for c := range s.conns {
		if c.User() == user {
			out = append(out, c.Outbound())
		}
	}
	return out
}
