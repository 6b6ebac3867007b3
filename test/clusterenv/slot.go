package clusterenv

import "github.com/ellipsis-chat/ellipsis/shared/names"

// NumSlots is the number of hash slots of a Redis Cluster.
const NumSlots = 16384

// SlotOf returns the Redis Cluster hash slot of key, in [0, NumSlots): the
// services' own names.Slot (CRC16 of the key's hash tag, per the Redis
// Cluster specification), so "typing:users:{abc}" and "chat:room:{abc}"
// share a slot. The tests check it against CLUSTER KEYSLOT of a real
// cluster.
func SlotOf(key string) int { return names.Slot(key) }
