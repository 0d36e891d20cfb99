// Reads Avro binary values with Apache Avro's Java library and writes them again.
//
// Input (the file named by the first argument), one case a line: the writer schema as JSON,
// a tab, the value's bytes in hex. Output, one line a case: the bytes Avro Java writes for
// the value it read (hex), a tab, whether the reader used every byte, a tab, the value as
// Avro's GenericData prints it; or "ERROR" and the message. Decimal, date, timestamp and uuid
// values are read into their Java types (BigDecimal, LocalDate, Instant, UUID) and written back
// from them, so the bytes are the library's own encoding of the values, not a copy.
import java.io.*;
import java.nio.file.*;
import java.util.*;
import org.apache.avro.*;
import org.apache.avro.data.TimeConversions;
import org.apache.avro.generic.*;
import org.apache.avro.io.*;

public class AvroCheck {
    public static void main(String[] args) throws Exception {
        GenericData model = new GenericData();
        model.addLogicalTypeConversion(new Conversions.DecimalConversion());
        model.addLogicalTypeConversion(new Conversions.UUIDConversion());
        model.addLogicalTypeConversion(new TimeConversions.DateConversion());
        model.addLogicalTypeConversion(new TimeConversions.TimestampMillisConversion());
        model.addLogicalTypeConversion(new TimeConversions.TimestampMicrosConversion());
        model.addLogicalTypeConversion(new TimeConversions.LocalTimestampMicrosConversion());
        model.addLogicalTypeConversion(new TimeConversions.LocalTimestampMillisConversion());
        Map<String, Schema> schemas = new HashMap<>();
        StringBuilder out = new StringBuilder();
        for (String line : Files.readAllLines(Paths.get(args[0]))) {
            if (line.isEmpty()) continue;
            int tab = line.lastIndexOf('\t');
            String text = line.substring(0, tab);
            byte[] payload = HexFormat.of().parseHex(line.substring(tab + 1));
            try {
                Schema schema = schemas.computeIfAbsent(text, t -> new Schema.Parser().parse(t));
                BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(payload, null);
                Object value = new GenericDatumReader<Object>(schema, schema, model).read(null, decoder);
                boolean all = decoder.isEnd();
                ByteArrayOutputStream bytes = new ByteArrayOutputStream();
                BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(bytes, null);
                new GenericDatumWriter<Object>(schema, model).write(value, encoder);
                encoder.flush();
                out.append(HexFormat.of().formatHex(bytes.toByteArray())).append('\t').append(all)
                   .append('\t').append(String.valueOf(value).replace('\n', ' ')).append('\n');
            } catch (Exception e) {
                out.append("ERROR\t").append(e.toString().replace('\n', ' ')).append('\n');
            }
        }
        System.out.print(out);
    }
}
