package brookload

import "encoding/binary"

// IDLen is the size of the header that names a record: the publisher (4
// bytes) and its sequence (8 bytes), big endian, the layout tools/bench
// uses as well. The rest of a record is padding up to its size.
const IDLen = 12

// ID names a record by the publisher loop that wrote it and its sequence.
type ID struct {
	Pub uint32
	Seq uint64
}

// Encode returns a record of size bytes (at least IDLen) that names id.
func Encode(id ID, size int) []byte {
	b := make([]byte, max(size, IDLen))
	binary.BigEndian.PutUint32(b[0:4], id.Pub)
	binary.BigEndian.PutUint64(b[4:12], id.Seq)
	for i := IDLen; i < len(b); i++ {
		b[i] = byte(i) // recognisable padding, so a torn record shows
	}
	return b
}

// Decode reads the id a record names; false if it is too short to name one.
func Decode(b []byte) (ID, bool) {
	if len(b) < IDLen {
		return ID{}, false
	}
	return ID{Pub: binary.BigEndian.Uint32(b[0:4]), Seq: binary.BigEndian.Uint64(b[4:12])}, true
}
