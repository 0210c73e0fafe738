package rmqfake

import (
	"math"
	"strconv"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
)

// Receipt handles are self-contained: they name the delivery (which queue,
// which offset, which checkpoint) and when it ends, never the client that
// received it nor any credential, so any client of the group can ack by
// handle, as with the real broker. The layout is rmqfake's own:
//
//	F1 <kind> <pop time ms> <invisible ms> <queue id> <offset> <sequence>
type handle struct {
	kind      byte  // kindQueue, kindRetry, kindFIFO or kindLite
	popTime   int64 // ms on the server's clock
	invisible int64 // ms from popTime
	queue     int32
	offset    int64
	seq       uint64 // checkpoint (normal pops) or message sequence (ordered pops)
}

const (
	kindQueue = 'n' // normal pop of a topic queue
	kindRetry = 'r' // normal pop of the group's retry queue
	kindFIFO  = 'f' // ordered pop of a FIFO group
	kindLite  = 'l' // ordered pop of a lite topic
)

func (h handle) String() string {
	b := make([]byte, 0, 64)
	b = append(b, "F1 "...)
	b = append(b, h.kind, ' ')
	b = strconv.AppendInt(b, h.popTime, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, h.invisible, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(h.queue), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, h.offset, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, h.seq, 10)
	return string(b)
}

func (h handle) expired(now int64) bool { return h.popTime+h.invisible <= now }

// parseHandle reads a handle; anything else fails the way the proxy fails on
// a handle it cannot decode (INTERNAL_SERVER_ERROR, scenario h).
func parseHandle(s string) (handle, *failure) {
	f := strings.Split(s, " ")
	bad := func() (handle, *failure) {
		return handle{}, fail(v2.Code_INTERNAL_SERVER_ERROR, "Parse failed, dataList size %d. IllegalArgumentException (rmqfake cannot decode this receipt handle)", len(f))
	}
	if len(f) != 7 || f[0] != "F1" || len(f[1]) != 1 {
		return bad()
	}
	var h handle
	var err error
	h.kind = f[1][0]
	nums := make([]int64, 5)
	for i := range nums {
		if nums[i], err = strconv.ParseInt(f[i+2], 10, 64); err != nil {
			return bad()
		}
	}
	if nums[2] < math.MinInt32 || nums[2] > math.MaxInt32 {
		return bad() // a queue id past int32 (4294967296 would wrap to queue 0)
	}
	h.popTime, h.invisible, h.queue, h.offset, h.seq = nums[0], nums[1], int32(nums[2]), nums[3], uint64(nums[4])
	switch h.kind {
	case kindQueue, kindRetry, kindFIFO, kindLite:
		return h, nil
	}
	return bad()
}

var errExpired = fail(v2.Code_INVALID_RECEIPT_HANDLE, "receipt handle is expired")
