package clusterenv

import "strings"

// NumSlots is the number of hash slots of a Redis Cluster.
const NumSlots = 16384

// SlotOf returns the Redis Cluster hash slot of key, in [0, NumSlots): the
// CRC16 (XMODEM: polynomial 0x1021, initial value 0) of the key's hash tag
// modulo 16384. Per the Redis Cluster specification the hash tag is the
// substring between the first '{' and the first '}' after it, when that
// substring is non-empty; otherwise the whole key is hashed. So
// "typing:room:{abc}" and "chat:room:{abc}" share a slot.
func SlotOf(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key)) % NumSlots
}

// crc16 is CRC-16/XMODEM, bit by bit (keys are short; no table needed).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
