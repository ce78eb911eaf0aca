package engine

// MaxQueued is the bound on a session's queued events, for the tests.
const MaxQueued = maxQueued
