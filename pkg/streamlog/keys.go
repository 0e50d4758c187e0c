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

	// Tags after "c" + copy id. Their order matters only in that each one
	// owns a contiguous key range: tag and tag+1 bound it.
	tagEvent    = 'e' // + offset -> cursor event
	tagSnapshot = 'k' // -> cursor snapshot
	tagMeta     = 'm' // -> metadata
	tagRecord   = 'r' // + offset -> record
)

// layoutVersion is stored under "v"; Open refuses a database written with
// another layout rather than misread it.
const layoutVersion = 1

var (
	versionKey = []byte{prefixVersion}
	nextIDKey  = []byte{prefixNextID}
	openKey    = []byte{prefixOpen}
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

func recordKey(id, off uint64) []byte { return offsetKey(id, tagRecord, off) }
func eventKey(id, off uint64) []byte  { return offsetKey(id, tagEvent, off) }

// recordLogEnd and eventLogEnd are exclusive upper bounds of each log's
// keys: no offset key reaches the next tag.
func recordLogEnd(id uint64) []byte { return copyTagKey(id, tagRecord+1) }
func eventLogEnd(id uint64) []byte  { return copyTagKey(id, tagEvent+1) }

// putRecordKey writes the record key into dst (len 18) without
// allocating; the append path encodes many keys.
func putRecordKey(dst []byte, id, off uint64) {
	dst[0] = prefixCopy
	binary.BigEndian.PutUint64(dst[1:9], id)
	dst[9] = tagRecord
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
