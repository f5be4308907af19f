/// Kafka's Java `Utils.murmur2`, which librdkafka's `murmur2_random` partitioner reproduces.
public func javaMurmur2(_ data: [UInt8]) -> Int32 {
    let m: UInt32 = 0x5bd1_e995
    var h: UInt32 = 0x9747_b28c ^ UInt32(data.count)
    let whole = data.count / 4
    for block in 0..<whole {
        let i = block * 4
        var k = UInt32(data[i]) | UInt32(data[i + 1]) << 8 | UInt32(data[i + 2]) << 16 | UInt32(data[i + 3]) << 24
        k &*= m
        k ^= k >> 24
        k &*= m
        h &*= m
        h ^= k
    }
    let tail = whole * 4
    switch data.count % 4 {
    case 3:
        h ^= UInt32(data[tail + 2]) << 16
        h ^= UInt32(data[tail + 1]) << 8
        h ^= UInt32(data[tail])
        h &*= m
    case 2:
        h ^= UInt32(data[tail + 1]) << 8
        h ^= UInt32(data[tail])
        h &*= m
    case 1:
        h ^= UInt32(data[tail])
        h &*= m
    default: break
    }
    h ^= h >> 13
    h &*= m
    h ^= h >> 15
    return Int32(bitPattern: h)
}

/// The partition the Java client picks for `key`.
public func javaPartition(_ key: [UInt8], partitions: Int32) -> Int32 {
    (javaMurmur2(key) & 0x7fff_ffff) % partitions
}
