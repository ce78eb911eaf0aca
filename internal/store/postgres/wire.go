package postgres

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/agentbox/agentbox/internal/store/postgres/pgwire"
)

// Every parameter and result travels in PostgreSQL's binary format, which
// for the few types the store uses is simple: text and bytea are their
// bytes, int8 eight big-endian bytes, and a one-dimensional array a short
// header followed by its elements. pgwire sends and reads every one in it.

// Type OIDs of the parameters the store sends.
const (
	oidBytea     = 17
	oidInt8      = 20
	oidText      = 25
	oidTextArray = 1009
	oidByteArray = 1001
	oidInt8Array = 1016
)

// param is one bound parameter.
type param struct {
	oid uint32
	val []byte // nil: NULL
}

func text(s string) param  { return param{oidText, []byte(s)} }
func bytea(b []byte) param { return param{oidBytea, nilIfEmpty(b)} }
func int8p(n int64) param  { return param{oidInt8, be64(n)} }
func optInt8(n *int64) param {
	if n == nil {
		return param{oid: oidInt8}
	}
	return int8p(*n)
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func be64(n int64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, uint64(n))
	return b
}

// split returns the values and OIDs of ps for pgwire.
func split(ps []param) (vals [][]byte, oids []uint32) {
	vals = make([][]byte, len(ps))
	oids = make([]uint32, len(ps))
	for i, p := range ps {
		vals[i], oids[i] = p.val, p.oid
	}
	return vals, oids
}

// array encodes a one-dimensional array of elements of type elem (NULL
// elements are nil) in the binary format.
func array(oid, elem uint32, elems [][]byte) param {
	n := 20
	hasNull := int32(0)
	for _, e := range elems {
		n += 4 + len(e)
		if e == nil {
			hasNull = 1
		}
	}
	b := make([]byte, 0, n)
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, uint32(hasNull))
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(len(elems)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, e := range elems {
		if e == nil {
			b = binary.BigEndian.AppendUint32(b, math.MaxUint32) // -1: NULL
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return param{oid, b}
}

// getInt8 decodes a binary int8 (or int4) column.
func getInt8(v []byte) (int64, error) {
	switch len(v) {
	case 8:
		return int64(binary.BigEndian.Uint64(v)), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(v))), nil
	}
	return 0, fmt.Errorf("integer column of %d bytes", len(v))
}

// Times are stored as int8 unix nanoseconds, as the SQLite store does:
// timestamptz keeps only microseconds.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

func nanos(t time.Time) (int64, error) {
	if t.Before(minTime) || t.After(maxTime) {
		return 0, fmt.Errorf("time %s out of the storable range", t)
	}
	return t.UnixNano(), nil
}

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// SQLSTATE codes the store maps.
const (
	codeUniqueViolation = "23505"
	codeForeignKey      = "23503"
)

// isCode reports whether err is a server error with SQLSTATE code.
func isCode(err error, code string) bool {
	var pe *pgwire.Error
	return errors.As(err, &pe) && pe.Code == code
}

// serverError reports whether err came from the server (the statement was
// refused), as opposed to the connection.
func serverError(err error) bool {
	var pe *pgwire.Error
	return errors.As(err, &pe)
}
