package policy

import (
	"strconv"
)

// Adjustment is a limit a request asked for and did not get as asked: the
// operator's global policy (or a daemon bound) lowered it. Nothing is
// lowered silently: results carry these, so a client can see what applied.
type Adjustment struct {
	// Field is the policy field, e.g. "resources.memory".
	Field string `json:"field"`
	// Requested and Applied are the values, written as a policy writes
	// them ("64Gi", "8Gi").
	Requested string `json:"requested"`
	Applied   string `json:"applied"`
	// By says what lowered it, e.g. "global policy".
	By string `json:"by"`
}

// Adjustments lists, in a fixed order, the limits req sets (non-zero) that
// eff, its effective policy under the global one, lowers. A limit req
// leaves unset (no limit) is not listed: nothing was asked of it.
func Adjustments(req, eff *Policy) []Adjustment {
	if req == nil || eff == nil {
		return nil
	}
	var out []Adjustment
	add := func(field string, lowered bool, requested, applied string) {
		if lowered {
			out = append(out, Adjustment{Field: field, Requested: requested, Applied: applied, By: "global policy"})
		}
	}
	rr, er := req.Resources, eff.Resources
	add("resources.memory", lower(rr.Memory, er.Memory), rr.Memory.String(), er.Memory.String())
	add("resources.cpus", lower(rr.CPUs, er.CPUs), strconv.FormatFloat(rr.CPUs, 'g', -1, 64), strconv.FormatFloat(er.CPUs, 'g', -1, 64))
	add("resources.pids", lower(rr.Pids, er.Pids), strconv.FormatInt(rr.Pids, 10), strconv.FormatInt(er.Pids, 10))
	add("resources.timeout", lower(rr.Timeout, er.Timeout), rr.Timeout.String(), er.Timeout.String())
	add("resources.disk", lower(rr.Disk, er.Disk), rr.Disk.String(), er.Disk.String())
	add("resources.output", lower(rr.Output, er.Output), rr.Output.String(), er.Output.String())
	add("resources.files", lower(rr.Files, er.Files), strconv.FormatInt(rr.Files, 10), strconv.FormatInt(er.Files, 10))
	rn, en := req.Network, eff.Network
	add("network.max_connections", lower(rn.MaxConnections, en.MaxConnections), strconv.Itoa(rn.MaxConnections), strconv.Itoa(en.MaxConnections))
	add("network.max_connection_rate", lower(rn.MaxConnectionRate, en.MaxConnectionRate), strconv.Itoa(rn.MaxConnectionRate), strconv.Itoa(en.MaxConnectionRate))
	return out
}

// lower says whether a limit asked for (non-zero) came out lower.
func lower[T int | int64 | float64 | ByteSize | Duration](asked, applied T) bool {
	return asked > 0 && applied > 0 && applied < asked
}
