// Package acpwire is the wire format of the Agent Client Protocol (ACP) as
// agentbox speaks it, on both sides (internal/agent/acp is the client of
// ACP agents, internal/acpserver serves ACP to editors): the messages and
// fields agentbox uses, with the JSON names, omitempty rules and union
// encodings of the protocol's schema (byte for byte those of
// github.com/coder/acp-go-sdk v0.13, which the tests prove), and Conn, a
// newline-delimited JSON-RPC 2.0 connection bounded against a hostile
// peer: the size of one message, the requests in flight each way and the
// queue of notifications.
package acpwire
