// java KeyPartitions.java COUNT < keys: for each line of stdin (a key in hex), the partition
// Kafka's producer gives it among COUNT partitions: BuiltInPartitioner.partitionForKey, the
// default partitioner's murmur2 of the serialized key. One partition number a line.
// tests/datasource/test_write_partitions.py runs it as the oracle for keyed appends.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;

public class KeyPartitions {
    public static void main(String[] args) throws Exception {
        int count = Integer.parseInt(args[0]);
        StringBuilder out = new StringBuilder();
        BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        for (String line; (line = in.readLine()) != null; ) {
            byte[] key = HexFormat.of().parseHex(line.trim());
            out.append(BuiltInPartitioner.partitionForKey(key, count)).append('\n');
        }
        System.out.print(out);
    }
}
