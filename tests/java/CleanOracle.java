// One cleaning round of one partition, rewritten by Apache Kafka's own batch filter
// (MemoryRecords.filterTo in the Java client) in the read chunks of the broker's cleanInto loop.
//
//   java -cp 'JARS/*' CleanOracle.java SPEC
//
// SPEC is a text file, one item per line:
//   round <now> <delete.retention.ms> <map latest offset> <first dirty offset>
//         <first uncleanable offset> <io buffer> <max io buffer> <max.message.bytes>
//   map <segment .log>          a dirty segment: its keyed records in [first dirty, latest]
//                               go into the offset map (MD5 of the key -> latest offset)
//   aborted <base offset>       a data batch of an aborted transaction (left out of the map)
//   discardable <base offset>   CleanedTransactionMetadata said the batch may go
//   producer-last <base offset> the batch is its producer's last one still needed
//   group                       a new output segment starts
//   clean <segment .log>        the next source segment of the current group
//   legacy-deletes-gone <segment .log>
//                               the segment is older than the legacy delete horizon: its magic
//                               0/1 tombstones go (LogCleaner's retainLegacyDeletesAndTxnMarkers)
//
// The record rule is Cleaner.shouldRetainRecord and the batch rule checkBatchRetention, both
// over the given decisions; the map is built here from the records with java.security's MD5.
//
// Prints one line per chunk appended to the output segment:
//   chunk <group> <maxOffset> <maxTimestamp> <shallowOffsetOfMaxTimestamp> <base64 bytes>

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.File;
import java.io.FileReader;
import java.io.OutputStreamWriter;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.record.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.MemoryRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.record.RecordBatch;
import org.apache.kafka.common.utils.BufferSupplier;
import org.apache.kafka.common.utils.Utils;

public class CleanOracle {
    static long now, deleteRetentionMs, latestOffset, firstDirty, upperBound;
    static int ioBuffer, maxIoBuffer, maxMessageBytes;
    static final Map<String, Long> MAP = new HashMap<>();
    static final Set<Long> ABORTED = new HashSet<>();
    static final Set<Long> DISCARDABLE = new HashSet<>();
    static final Set<Long> PRODUCER_LAST = new HashSet<>();
    static final Set<String> LEGACY_DELETES_GONE = new HashSet<>();
    static boolean retainLegacyDeletes = true;

    public static void main(String[] args) throws Exception {
        List<String> mapped = new ArrayList<>();
        List<List<String>> groups = new ArrayList<>();
        try (BufferedReader in = new BufferedReader(new FileReader(args[0], StandardCharsets.UTF_8))) {
            for (String line; (line = in.readLine()) != null; ) {
                String[] f = line.split(" ", 2);
                switch (f[0]) {
                    case "round": {
                        String[] v = f[1].split(" ");
                        now = Long.parseLong(v[0]);
                        deleteRetentionMs = Long.parseLong(v[1]);
                        latestOffset = Long.parseLong(v[2]);
                        firstDirty = Long.parseLong(v[3]);
                        upperBound = Long.parseLong(v[4]);
                        ioBuffer = Integer.parseInt(v[5]);
                        maxIoBuffer = Integer.parseInt(v[6]);
                        maxMessageBytes = Integer.parseInt(v[7]);
                        break;
                    }
                    case "map": mapped.add(f[1]); break;
                    case "aborted": ABORTED.add(Long.parseLong(f[1])); break;
                    case "discardable": DISCARDABLE.add(Long.parseLong(f[1])); break;
                    case "producer-last": PRODUCER_LAST.add(Long.parseLong(f[1])); break;
                    case "group": groups.add(new ArrayList<>()); break;
                    case "clean": groups.get(groups.size() - 1).add(f[1]); break;
                    case "legacy-deletes-gone": LEGACY_DELETES_GONE.add(f[1]); break;
                    default: throw new IllegalArgumentException("bad spec line: " + line);
                }
            }
        }
        for (String path : mapped) {
            buildMap(new File(path));
        }
        BufferedWriter out = new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        for (int g = 0; g < groups.size(); g++) {
            for (String path : groups.get(g)) {
                cleanInto(new File(path), g, out);
            }
        }
        out.flush();
    }

    static String md5(ByteBuffer key) throws Exception {
        MessageDigest digest = MessageDigest.getInstance("MD5");
        digest.update(key.duplicate());
        return Base64.getEncoder().encodeToString(digest.digest());
    }

    static void buildMap(File segment) throws Exception {
        try (FileRecords records = FileRecords.open(segment, false)) {
            for (FileChannelRecordBatch batch : records.batches()) {
                if (batch.isControlBatch() || ABORTED.contains(batch.baseOffset())) {
                    continue;
                }
                for (Record record : batch) {
                    if (record.hasKey() && record.offset() >= firstDirty && record.offset() <= latestOffset) {
                        MAP.put(md5(record.key()), record.offset());
                    }
                }
            }
        }
    }

    // LogCleaner's RecordFilter over the given decisions.
    static final class Filter extends MemoryRecords.RecordFilter {
        boolean discardBatchRecords;

        Filter() {
            super(CleanOracle.now, CleanOracle.deleteRetentionMs);
        }

        @Override
        protected BatchRetentionResult checkBatchRetention(RecordBatch batch) {
            boolean canDiscard = DISCARDABLE.contains(batch.baseOffset());
            if (batch.isControlBatch()) {
                discardBatchRecords = canDiscard && batch.deleteHorizonMs().isPresent()
                        && batch.deleteHorizonMs().getAsLong() <= currentTime;
            } else {
                discardBatchRecords = canDiscard;
            }
            BatchRetention retention;
            if (batch.hasProducerId() && PRODUCER_LAST.contains(batch.baseOffset())) {
                retention = BatchRetention.RETAIN_EMPTY;
            } else if (batch.nextOffset() == upperBound) {
                retention = BatchRetention.RETAIN_EMPTY;
            } else if (discardBatchRecords) {
                retention = BatchRetention.DELETE;
            } else {
                retention = BatchRetention.DELETE_EMPTY;
            }
            return new BatchRetentionResult(retention, canDiscard && batch.isControlBatch());
        }

        @Override
        protected boolean shouldRetainRecord(RecordBatch batch, Record record) {
            if (discardBatchRecords) {
                return false;
            }
            if (batch.isControlBatch()) {
                return true;
            }
            if (record.offset() > latestOffset) {
                return true;
            }
            if (!record.hasKey()) {
                return false;
            }
            long found;
            try {
                found = MAP.getOrDefault(md5(record.key()), -1L);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
            boolean retainDeletes = batch.magic() < RecordBatch.MAGIC_VALUE_V2
                    ? retainLegacyDeletes
                    : !batch.deleteHorizonMs().isPresent() || currentTime < batch.deleteHorizonMs().getAsLong();
            return record.offset() >= found && (record.hasValue() || retainDeletes);
        }
    }

    // Cleaner.cleanInto: read chunks of whole batches, filter each, one append per chunk.
    static void cleanInto(File segment, int group, BufferedWriter out) throws Exception {
        ByteBuffer readBuffer = ByteBuffer.allocate(ioBuffer);
        ByteBuffer writeBuffer = ByteBuffer.allocate(ioBuffer);
        Filter filter = new Filter();
        retainLegacyDeletes = !LEGACY_DELETES_GONE.contains(segment.getPath());
        TopicPartition tp = new TopicPartition("t", 0);
        try (FileRecords source = FileRecords.open(segment, false)) {
            int position = 0;
            while (position < source.sizeInBytes()) {
                readBuffer.clear();
                writeBuffer.clear();
                source.readInto(readBuffer, position);
                MemoryRecords records = MemoryRecords.readableRecords(readBuffer);
                MemoryRecords.FilterResult result = records.filterTo(tp, filter, writeBuffer,
                        maxMessageBytes, BufferSupplier.create());
                position += result.bytesRead();
                ByteBuffer output = result.outputBuffer();
                if (output.position() > 0) {
                    output.flip();
                    byte[] bytes = Utils.toArray(output);
                    out.write("chunk " + group + " " + result.maxOffset() + " " + result.maxTimestamp()
                            + " " + result.shallowOffsetOfMaxTimestamp() + " "
                            + Base64.getEncoder().encodeToString(bytes) + "\n");
                }
                if (readBuffer.limit() > 0 && result.bytesRead() == 0) {
                    // growBuffersOrFail
                    int maxSize;
                    if (readBuffer.capacity() >= maxMessageBytes) {
                        Integer next = records.firstBatchSize();
                        if (next == null || next <= readBuffer.capacity()) {
                            throw new IllegalStateException("cannot grow for the batch at " + position);
                        }
                        maxSize = next;
                    } else {
                        maxSize = maxMessageBytes;
                    }
                    int ceiling = Math.max(maxSize, maxIoBuffer);
                    if (readBuffer.capacity() >= ceiling) {
                        throw new IllegalStateException("batch larger than " + ceiling);
                    }
                    int size = Math.min(readBuffer.capacity() * 2, ceiling);
                    readBuffer = ByteBuffer.allocate(size);
                    writeBuffer = ByteBuffer.allocate(size);
                }
            }
        }
    }
}
