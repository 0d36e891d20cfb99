// Reads every segment of one or more Kafka log dirs with Apache Kafka's own client classes
// (FileRecords, the record batches and records it yields) and prints what it read as JSON Lines.
//
//   java -cp 'JARS/*' ReadLog.java DIR...
//
// A DIR that holds .log files is read as one partition dir; otherwise each of its subdirectories
// that holds .log files is (a log dir). Every batch and record passes ensureValid(), every record
// is read in full (decompressed, headers parsed), and a segment must end on a batch boundary.
// Any failure prints the file and the batch position to stderr and exits 1.
//
// Lines on stdout, in file order:
//   {"type":"batch", "dir", "segment", "position", "size", "base_offset", "last_offset", "count",
//    "magic", "compression", "timestamp_type", "max_timestamp", "producer_id", "producer_epoch",
//    "base_sequence", "partition_leader_epoch", "transactional", "control", "crc"}
//   {"type":"record", "dir", "segment", "offset", "timestamp", "key", "value", "headers"}
//   {"type":"segment", "dir", "segment", "size", "batches"}
// key, value and header values are base64, or null (distinct from "" for an empty array);
// headers is a list of [key, value] pairs in record order.

import java.io.BufferedWriter;
import java.io.File;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.record.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.FileRecords;
import org.apache.kafka.common.record.Record;
import org.apache.kafka.common.utils.Utils;

public class ReadLog {
    private static final Base64.Encoder B64 = Base64.getEncoder();

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: ReadLog DIR...");
            System.exit(2);
        }
        BufferedWriter out = new BufferedWriter(
                new OutputStreamWriter(System.out, StandardCharsets.UTF_8), 1 << 16);
        for (String arg : args) {
            for (File dir : partitionDirs(new File(arg))) {
                for (File segment : segments(dir)) {
                    readSegment(dir, segment, out);
                }
            }
        }
        out.flush();
    }

    static List<File> partitionDirs(File root) {
        if (!root.isDirectory()) {
            fail(root.getPath(), -1, "not a directory");
        }
        List<File> dirs = new ArrayList<>();
        if (segments(root).length > 0) {
            dirs.add(root);
            return dirs;
        }
        File[] children = root.listFiles(File::isDirectory);
        Arrays.sort(children);
        for (File child : children) {
            if (segments(child).length > 0) {
                dirs.add(child);
            }
        }
        return dirs;
    }

    static File[] segments(File dir) {
        // 20-digit names: name order is offset order. Only finished segments (.log), no
        // .cleaned/.swap/.deleted leftovers.
        File[] files = dir.listFiles(f -> f.isFile() && f.getName().endsWith(".log"));
        if (files == null) {
            return new File[0];
        }
        Arrays.sort(files);
        return files;
    }

    static void readSegment(File dir, File segment, BufferedWriter out) throws Exception {
        String where = "\"dir\":" + str(dir.getName()) + ",\"segment\":" + str(segment.getName());
        int position = 0;
        int batches = 0;
        try (FileRecords records = FileRecords.open(segment, false)) {
            for (FileChannelRecordBatch batch : records.batches()) {
                position = batch.position();
                batch.ensureValid();
                out.write("{\"type\":\"batch\"," + where
                        + ",\"position\":" + position
                        + ",\"size\":" + batch.sizeInBytes()
                        + ",\"base_offset\":" + batch.baseOffset()
                        + ",\"last_offset\":" + batch.lastOffset()
                        + ",\"count\":" + batch.countOrNull()
                        + ",\"magic\":" + batch.magic()
                        + ",\"compression\":" + str(batch.compressionType().name)
                        + ",\"timestamp_type\":" + str(batch.timestampType().name)
                        + ",\"max_timestamp\":" + batch.maxTimestamp()
                        + ",\"producer_id\":" + batch.producerId()
                        + ",\"producer_epoch\":" + batch.producerEpoch()
                        + ",\"base_sequence\":" + batch.baseSequence()
                        + ",\"partition_leader_epoch\":" + batch.partitionLeaderEpoch()
                        + ",\"transactional\":" + batch.isTransactional()
                        + ",\"control\":" + batch.isControlBatch()
                        + ",\"crc\":" + batch.checksum()
                        + "}\n");
                // iterator() reads the whole batch (decompressing it) and checks that the
                // records fill it exactly.
                for (Record record : batch) {
                    record.ensureValid();
                    out.write("{\"type\":\"record\"," + where
                            + ",\"offset\":" + record.offset()
                            + ",\"timestamp\":" + record.timestamp()
                            + ",\"key\":" + bytes(record.hasKey() ? Utils.toArray(record.key()) : null)
                            + ",\"value\":" + bytes(record.hasValue() ? Utils.toArray(record.value()) : null)
                            + ",\"headers\":" + headers(record.headers())
                            + "}\n");
                }
                position += batch.sizeInBytes();
                batches++;
            }
            // batches() stops silently before a partial batch; a segment we read must not have one.
            if (position != records.sizeInBytes()) {
                fail(segment.getPath(), position, (records.sizeInBytes() - position)
                        + " bytes after the last whole batch (file size " + records.sizeInBytes() + ")");
            }
        } catch (Exception e) {
            fail(segment.getPath(), position, e.getClass().getName() + ": " + e.getMessage());
        }
        out.write("{\"type\":\"segment\"," + where + ",\"size\":" + segment.length()
                + ",\"batches\":" + batches + "}\n");
    }

    static String headers(Header[] headers) {
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < headers.length; i++) {
            if (i > 0) {
                sb.append(',');
            }
            sb.append('[').append(str(headers[i].key())).append(',')
                    .append(bytes(headers[i].value())).append(']');
        }
        return sb.append(']').toString();
    }

    static String bytes(byte[] b) {
        return b == null ? "null" : "\"" + B64.encodeToString(b) + "\"";
    }

    static String str(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                sb.append('\\').append(c);
            } else if (c < 0x20) {
                sb.append(String.format("\\u%04x", (int) c));
            } else {
                sb.append(c);
            }
        }
        return sb.append('"').toString();
    }

    static void fail(String file, int position, String problem) {
        System.out.flush();
        System.err.println("ReadLog: " + file + (position >= 0 ? " at position " + position : "")
                + ": " + problem);
        System.exit(1);
    }
}
