package streamlog

import (
	"encoding/binary"
	"fmt"
)

// Key prefixes. Every key starts with one byte that says what it is; the
// layout is described in doc.go.
const (
	prefixVersion = 'v' // "v" -> layout version
	prefixNextID  = 'g' // "g" -> next copy id to assign
	prefixName    = 'n' // "n" + stream name -> copy id
	prefixCopy    = 'c' // "c" + copy id + tag ... -> the copy's own keys
	prefixOpen    = 'o' // "o" -> present while a process has the store open
	prefixMoving  = 'l' // "l" -> present while Open moves layout 1 to batches

	// Tags after "c" + copy id. Their order matters only in that each one
	// owns a contiguous key range: tag and tag+1 bound it.
	tagBatch    = 'b' // + last offset -> a batch of records (layout 2)
	tagEvent    = 'e' // + offset -> cursor event
	tagSnapshot = 'k' // -> cursor snapshot
	tagMeta     = 'm' // -> metadata
	tagRecordV1 = 'r' // + offset -> one record (layout 1, moved into batches by Open)
)

// layoutVersion is stored under "v"; Open moves a database of layout 1
// (a key per record) to it and refuses any other rather than misread it.
const layoutVersion = 2

var (
	versionKey = []byte{prefixVersion}
	nextIDKey  = []byte{prefixNextID}
	openKey    = []byte{prefixOpen}
	movingKey  = []byte{prefixMoving}
)

func nameKey(stream string) []byte {
	k := make([]byte, 0, 1+len(stream))
	k = append(k, prefixName)
	return append(k, stream...)
}

// nameRange bounds every name index key.
func nameRange() (lo, hi []byte) { return []byte{prefixName}, []byte{prefixName + 1} }

// copyPrefix is "c" + id; every key of the copy starts with it, so the
// copy's whole key space is [copyPrefix(id), copyPrefix(id+1)).
func copyPrefix(id uint64) []byte {
	k := make([]byte, 9, 18)
	k[0] = prefixCopy
	binary.BigEndian.PutUint64(k[1:], id)
	return k
}

func copyTagKey(id uint64, tag byte) []byte { return append(copyPrefix(id), tag) }

func metaKey(id uint64) []byte     { return copyTagKey(id, tagMeta) }
func snapshotKey(id uint64) []byte { return copyTagKey(id, tagSnapshot) }

func offsetKey(id uint64, tag byte, off uint64) []byte {
	k := copyTagKey(id, tag)
	return binary.BigEndian.AppendUint64(k, off)
}

// batchKey is the key of the record batch whose last record is at off. A
// batch holds contiguous records and batches do not overlap, so the batch
// holding offset o is the first at or after batchKey(id, o).
func batchKey(id, off uint64) []byte { return offsetKey(id, tagBatch, off) }
func eventKey(id, off uint64) []byte { return offsetKey(id, tagEvent, off) }

// recordLogEnd and eventLogEnd are exclusive upper bounds of each log's
// keys: no offset key reaches the next tag.
func recordLogEnd(id uint64) []byte { return copyTagKey(id, tagBatch+1) }
func eventLogEnd(id uint64) []byte  { return copyTagKey(id, tagEvent+1) }

// putBatchKey writes the batch key into dst (len 18) without allocating.
func putBatchKey(dst []byte, id, off uint64) {
	dst[0] = prefixCopy
	binary.BigEndian.PutUint64(dst[1:9], id)
	dst[9] = tagBatch
	binary.BigEndian.PutUint64(dst[10:18], off)
}

const offsetKeyLen = 18

// keyOffset returns the offset of a record or event key.
func keyOffset(k []byte) (uint64, error) {
	if len(k) != offsetKeyLen {
		return 0, fmt.Errorf("streamlog: log key has %d bytes, want %d", len(k), offsetKeyLen)
	}
	return binary.BigEndian.Uint64(k[10:]), nil
}
