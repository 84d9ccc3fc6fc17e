package redisq

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha1" //nolint:gosec // a change detector shared with Redis's redis.sha1hex, not a security digest
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"smsgw/internal/queue"
	"smsgw/internal/queue/redisq/luasrc"
	"smsgw/internal/sms"
)

// Compaction of final records. A completed message's final record joins the
// LIST of its creation second (keys.fin), where a receipt edits it in Lua.
// Most receipts come within minutes; after that a second's records are only
// read, and a LIST of short strings is a poor use of RAM: most of a record
// is the same from one message to the next (producer, reference prefix,
// masked number, times). Once a second's LIST has had no write for
// CompactAfter, Compact turns it into one STRING (its blob, keys.finBlob)
// of the records compressed together, and the Go readers (Get, receipts,
// the provider-id lookup, replays) decode it.
//
// Every write still goes to the LIST: a message that completes late into a
// compacted second is pushed onto a new LIST, and a receipt to a compacted
// record has the caller hand the blob's element to the receipt script,
// which puts it back into the LIST (if the blob is still the one read) and
// edits it there. A second may so have both; its LIST's element of a
// message is always the newer. Compact merges a LIST into the blob with a
// compare-and-set script (the LIST and the blob must be as read), so
// replicas may compact at once and a write that races a compaction is
// never lost: the one that comes second fails and is retried. A blob
// expires no earlier than the LIST it took in, so retention prunes blobs as
// it prunes LISTs.
//
// So that replicas do not all read the same seconds only for all but one
// to lose the compare-and-set, Compact first claims the seconds it takes
// (claimDueScript): one script lists them and moves each out of reach of
// the other replicas' Compact for CompactClaim. The claim only saves
// work; the compare-and-set alone keeps compaction correct. A second is
// never dropped by a claim: it stays in the compaction ZSET until a
// compaction has taken it in, and a replica that dies holding it leaves
// it to whoever calls Compact once the claim has run out.

// DefaultCompactAfter is how long a second's final LIST must have been
// quiet (no completion, no receipt) before Compact takes it: most delivery
// receipts arrive well within it, so few need a compacted record back.
const DefaultCompactAfter = 15 * time.Minute

// DefaultCompactClaim is how long the seconds one Compact call claims stay
// out of the other replicas' reach: far longer than a call takes (64
// seconds of records, well under a second), far shorter than
// DefaultCompactAfter, so that a write during a claim always makes its
// second wait the full quiet time again, and a replica that dies holding
// a claim delays its seconds by a minute at most.
const DefaultCompactClaim = time.Minute

// maxExtractTries bounds how often one call reads a blob that changed
// under it (another compaction of the same second) before giving up.
const maxExtractTries = 5

// The blob: blobFormat, the number of records n (uvarint), the n records'
// FinalShort names (12 bytes each, as they are: random bits do not
// compress), then one DEFLATE stream of the n records, each its length
// (uvarint) and its text. A lookup finds the name before it inflates.
const blobFormat = 1

// blobEntry is one record of a blob: its message's FinalShort and its
// final record (any version).
type blobEntry struct{ short, rec string }

// encodeBlob is the blob of entries.
func encodeBlob(entries []blobEntry) (string, error) {
	var b bytes.Buffer
	b.WriteByte(blobFormat)
	b.Write(binary.AppendUvarint(nil, uint64(len(entries))))
	for _, e := range entries {
		if len(e.short) != 12 {
			return "", fmt.Errorf("compact: name of %d bytes", len(e.short))
		}
		b.WriteString(e.short)
	}
	w, _ := writers.Get().(*flate.Writer)
	if w == nil {
		var err error
		if w, err = flate.NewWriter(&b, flate.BestCompression); err != nil {
			return "", err
		}
	} else {
		w.Reset(&b)
	}
	defer writers.Put(w)
	for _, e := range entries {
		if _, err := w.Write(binary.AppendUvarint(nil, uint64(len(e.rec)))); err != nil {
			return "", err
		}
		if _, err := io.WriteString(w, e.rec); err != nil {
			return "", err
		}
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// blobNames returns the names of a blob's records and where its DEFLATE
// stream starts.
func blobNames(blob string) ([]string, int, error) {
	if len(blob) == 0 || blob[0] != blobFormat {
		return nil, 0, errors.New("compacted records: unknown format")
	}
	n, k := binary.Uvarint([]byte(blob[1:min(len(blob), 1+binary.MaxVarintLen64)]))
	at := 1 + k
	if k <= 0 || n > uint64(len(blob)-at)/12 {
		return nil, 0, errors.New("compacted records: malformed count")
	}
	names := make([]string, n)
	for i := range names {
		names[i] = blob[at : at+12]
		at += 12
	}
	return names, at, nil
}

// The DEFLATE writers and readers keep large state (~600 KB and ~40 KB):
// reused, not made per blob.
var (
	writers sync.Pool // *flate.Writer
	readers sync.Pool // flate.Resetter and io.ReadCloser
)

// inflate is the records' text of a blob whose DEFLATE stream starts at.
func inflate(blob string, at int) ([]byte, error) {
	src := strings.NewReader(blob[at:])
	r, _ := readers.Get().(io.ReadCloser)
	if r == nil {
		r = flate.NewReader(src)
	} else if err := r.(flate.Resetter).Reset(src, nil); err != nil {
		return nil, err
	}
	defer readers.Put(r)
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("compacted records: %w", err)
	}
	return raw, nil
}

// decodeBlob is the records of a blob, in order.
func decodeBlob(blob string) ([]blobEntry, error) {
	return decodeBlobUpTo(blob, -1)
}

// decodeBlobUpTo is decodeBlob, stopping after record last (all: -1).
func decodeBlobUpTo(blob string, last int) ([]blobEntry, error) {
	names, at, err := blobNames(blob)
	if err != nil {
		return nil, err
	}
	raw, err := inflate(blob, at)
	if err != nil {
		return nil, err
	}
	out := make([]blobEntry, 0, len(names))
	for i := range names {
		n, k := binary.Uvarint(raw)
		if k <= 0 || uint64(len(raw)-k) < n {
			return nil, errors.New("compacted records: malformed record length")
		}
		out = append(out, blobEntry{short: names[i], rec: string(raw[k : k+int(n)])})
		raw = raw[k+int(n):]
		if i == last {
			return out, nil
		}
	}
	if len(raw) != 0 {
		return nil, errors.New("compacted records: trailing bytes")
	}
	return out, nil
}

// blobRecord is the final record of message id in blob; found is false
// when the blob has none. Only a blob that names id is inflated.
func blobRecord(blob, id string) (rec string, found bool, err error) {
	short := queue.FinalShort(id)
	names, _, err := blobNames(blob)
	if err != nil || short == "" {
		return "", false, err
	}
	at := -1
	for i, n := range names {
		if n == short {
			at = i
		}
	}
	if at < 0 {
		return "", false, nil
	}
	entries, err := decodeBlobUpTo(blob, at)
	if err != nil {
		return "", false, err
	}
	return entries[at].rec, true, nil
}

// listElement is the final LIST element of id's final record rec: the
// name the scripts match (fin_match in luasrc) for its version.
func listElement(id, rec string) string {
	if strings.HasPrefix(rec, "3") {
		return queue.FinalShort(id) + rec
	}
	return strings.TrimPrefix(id, "msg_") + "\x1f" + rec
}

// listEntry reads a final LIST element as a blob entry. A FinalShort
// name's first byte holds 2 bits (< 4), an earlier release's name starts
// with a character of the id (≥ '0'), so the two never mix up, even when
// the 13th character of an old name is a '3'.
func listEntry(el string) (blobEntry, bool) {
	if len(el) >= 13 && el[0] < 4 && el[12] == '3' {
		return blobEntry{short: el[:12], rec: el[12:]}, true
	}
	if len(el) >= 27 && el[26] == '\x1f' {
		if short := queue.FinalShort("msg_" + el[:26]); short != "" {
			return blobEntry{short: short, rec: el[27:]}, true
		}
	}
	return blobEntry{}, false
}

// blobSHA is the hex SHA-1 of a blob, as redis.sha1hex computes it.
func blobSHA(blob string) string {
	h := sha1.Sum([]byte(blob)) //nolint:gosec // see the import
	return hex.EncodeToString(h[:])
}

// listDigest is the digest of a LIST's elements compactScript compares:
// the SHA-1 of each element's length, ":" and the element, in order.
func listDigest(els []string) string {
	h := sha1.New() //nolint:gosec // see the import
	for _, el := range els {
		_, _ = io.WriteString(h, strconv.Itoa(len(el))+":"+el)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// mergeBlob is the entries of blob (may be empty) with the elements of
// its second's LIST, whose entries replace the blob's of the same message.
func mergeBlob(blob string, els []string) ([]blobEntry, error) {
	var out []blobEntry
	if blob != "" {
		var err error
		if out, err = decodeBlob(blob); err != nil {
			return nil, err
		}
	}
	at := make(map[string]int, len(out)+len(els))
	for i, e := range out {
		at[e.short] = i
	}
	for _, el := range els {
		e, ok := listEntry(el)
		if !ok {
			return nil, errors.New("compact: a final LIST element without a known name")
		}
		if i, ok := at[e.short]; ok {
			out[i] = e
			continue
		}
		at[e.short] = len(out)
		out = append(out, e)
	}
	return out, nil
}

// readFinalScript reads a second's final LIST and blob at one instant.
//
// KEYS[1] the final LIST, KEYS[2] the blob. Returns {elements, blob or
// false}.
var readFinalScript = redis.NewScript(`
return {redis.call('LRANGE', KEYS[1], 0, -1), redis.call('GET', KEYS[2])}
`)

// readFinal is the final LIST elements and the blob ("" for none) of
// Unix second sec.
func (q *Queue) readFinal(ctx context.Context, sec int64) ([]string, string, error) {
	reply, err := readFinalScript.Run(ctx, q.c, []string{q.k.finAt(sec), q.k.finBlob(sec)}).Slice()
	if err != nil {
		return nil, "", err
	}
	if len(reply) != 2 {
		return nil, "", fmt.Errorf("final records: unexpected reply %v", reply)
	}
	raw, _ := reply[0].([]any)
	els := make([]string, len(raw))
	for i, v := range raw {
		els[i], _ = v.(string)
	}
	blob, _ := reply[1].(string)
	return els, blob, nil
}

// claimDueScript claims up to most seconds whose final LIST has been
// quiet long enough, oldest first, and returns them. The compaction ZSET
// is scored by a second's last write, and a second is due once that score
// is at least the quiet time old; a claim re-scores each second it takes
// as though its last write were the quiet time before the claim's end, so
// that no other Compact lists it while the claim lasts, and any Compact
// lists it again once the claim has ended. A write to a claimed second
// (fin_due, luasrc) overwrites the claim's score with its own time: the
// second then waits to be quiet again like any other (with CompactAfter
// longer than CompactClaim, as by default, that is after the claim's end;
// with a shorter one the write may end the claim early, and another
// replica read the second before the claimer is done: a read for nothing,
// never a wrong result). A claim never takes a second out of the ZSET:
// only compactScript does (the second compacted, or its LIST gone), and
// compactSeconds for a second it cannot compact.
//
// KEYS[1] the compaction ZSET. ARGV[1] how long quiet, ms, ARGV[2] how
// long a claim lasts, ms, ARGV[3] most.
var claimDueScript = redis.NewScript(luasrc.Prelude + `
local upto = math.floor(now_us() / 1000) - tonumber(ARGV[1])
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', upto, 'LIMIT', 0, tonumber(ARGV[3]))
for _, sec in ipairs(due) do
  redis.call('ZADD', KEYS[1], 'XX', upto + tonumber(ARGV[2]), sec)
end
return due
`)

// compactScript replaces a second's final LIST and blob by the merged
// blob, if both are still as the caller read them.
//
// KEYS[1] the final LIST, KEYS[2] the blob, KEYS[3] the compaction ZSET.
// ARGV[1] the second, ARGV[2] the LIST's digest (listDigest), ARGV[3] the
// blob's SHA-1 ("" for none), ARGV[4] the new blob, ARGV[5] its time to
// live ms should neither key have one.
// Returns 1 compacted, 0 nothing to compact (the LIST is gone), -1 the
// LIST or the blob changed since they were read (left for a later pass).
var compactScript = redis.NewScript(`
local items = redis.call('LRANGE', KEYS[1], 0, -1)
if #items == 0 then
  redis.call('ZREM', KEYS[3], ARGV[1])
  return 0
end
local parts = {}
for i, v in ipairs(items) do parts[i] = #v .. ':' .. v end
if redis.sha1hex(table.concat(parts)) ~= ARGV[2] then return -1 end
local old = redis.call('GET', KEYS[2])
local sha = ''
if old then sha = redis.sha1hex(old) end
if sha ~= ARGV[3] then return -1 end
local ttl = math.max(redis.call('PTTL', KEYS[1]), redis.call('PTTL', KEYS[2]))
if ttl <= 0 then ttl = tonumber(ARGV[5]) end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
`)

// compactBatch is how many seconds one pipelined read of Compact takes.
const compactBatch = 16

// Compact compacts up to most creation seconds whose final LIST has had
// no write for the queue's CompactAfter (oldest first), and returns how
// many it compacted. Any replica may call it at any time: it claims the
// seconds it takes for the queue's CompactClaim, so that the other
// replicas' calls take others meanwhile, and a second whose LIST or blob
// changes meanwhile is left for a later call. The seconds of a call that
// fails or is canceled halfway wait for their claim to end.
func (q *Queue) Compact(ctx context.Context, most int) (n int, err error) {
	if err := q.begin(ctx, "compact"); err != nil {
		return 0, err
	}
	if most <= 0 {
		return 0, nil
	}
	start := time.Now()
	defer func() { q.m.observe("compact", start, err) }()
	due, err := q.claimDue(ctx, most)
	if err != nil {
		return 0, fmt.Errorf("redisq: compact: %w", err)
	}
	for lo := 0; lo < len(due); lo += compactBatch {
		done, err := q.compactSeconds(ctx, due[lo:min(lo+compactBatch, len(due))])
		n += done
		if err != nil {
			return n, fmt.Errorf("redisq: compact: %w", err)
		}
	}
	return n, nil
}

// claimDue claims up to most due seconds (claimDueScript) and returns
// them, oldest first.
func (q *Queue) claimDue(ctx context.Context, most int) ([]string, error) {
	return claimDueScript.Run(ctx, q.c, []string{q.k.finDue()},
		q.compactAfter.Milliseconds(), q.compactClaim.Milliseconds(), most).StringSlice()
}

// compactSeconds compacts the seconds secs (members of the compaction
// ZSET): one pipelined read, then one compactScript each. Each second
// read counts once in the compactions metric, by its outcome.
func (q *Queue) compactSeconds(ctx context.Context, secs []string) (n int, err error) {
	lists := make([]*redis.StringSliceCmd, len(secs))
	blobs := make([]*redis.StringCmd, len(secs))
	if _, err := q.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range secs {
			sec, _ := strconv.ParseInt(s, 10, 64)
			lists[i] = p.LRange(ctx, q.k.finAt(sec), 0, -1)
			blobs[i] = p.Get(ctx, q.k.finBlob(sec))
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	for i, s := range secs {
		if err := errors.Join(lists[i].Err(), blobs[i].Err()); err != nil && !errors.Is(blobs[i].Err(), redis.Nil) {
			return n, err
		}
		sec, perr := strconv.ParseInt(s, 10, 64)
		els, blob := lists[i].Val(), blobs[i].Val()
		entries, err := mergeBlob(blob, els)
		if perr != nil || err != nil {
			// Left as it is (still read as a LIST) until it expires.
			q.log.Error("compact: final records of a second cannot be compacted; left uncompacted",
				"second", s, "err", errors.Join(perr, err))
			q.m.compaction(compactUnreadable)
			if err := q.c.ZRem(ctx, q.k.finDue(), s).Err(); err != nil {
				return n, err
			}
			continue
		}
		newBlob := ""
		if len(els) > 0 {
			if newBlob, err = encodeBlob(entries); err != nil {
				return n, err
			}
		}
		sha := ""
		if blob != "" {
			sha = blobSHA(blob)
		}
		keys := []string{q.k.finAt(sec), q.k.finBlob(sec), q.k.finDue()}
		res, err := compactScript.Run(ctx, q.c, keys, s, listDigest(els), sha, newBlob, q.retention.Milliseconds()).Int()
		if err != nil {
			return n, err
		}
		switch res {
		case 1:
			n++
			q.m.compaction(compactDone)
		case 0:
			q.m.compaction(compactGone)
		default:
			q.m.compaction(compactChanged)
		}
	}
	return n, nil
}

// precheckOld looks up, before the enqueue script runs, the messages of
// cs (without a result yet) whose id is old enough that its second may
// have been compacted: the script sees only LISTs, and a retried enqueue
// of an id stored before must find it. A message found is existing.
func (q *Queue) precheckOld(ctx context.Context, cs []queue.Checked, results []queue.CheckedResult) error {
	for i := range cs {
		m := cs[i].Message
		if m == nil || results[i].Message != nil {
			continue
		}
		created, ok := sms.IDTime(m.ID)
		if !ok || time.Since(created) < q.compactAfter/2 {
			continue
		}
		found, err := q.Get(ctx, m.ID)
		switch {
		case err == nil:
			results[i].EnqueueResult = queue.EnqueueResult{Message: found, Existed: true}
		case !errors.Is(err, queue.ErrNotFound):
			return fmt.Errorf("redisq: enqueue: %w", err)
		}
	}
	return nil
}
