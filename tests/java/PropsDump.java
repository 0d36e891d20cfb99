// java PropsDump.java FILE...: each file loaded by java.util.Properties.load(Reader) over UTF-8
// and printed as one JSON line: {"file": name, "props": {key: value}} or {"file": name,
// "error": text}. Keys are sorted; every character outside printable ASCII is written as a JSON
// backslash-u escape of its UTF-16 unit, so the output is ASCII and says exactly what Java read.
// tests/test_properties.py runs it once for all its files (one JVM start).

import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Properties;
import java.util.TreeSet;

public class PropsDump {
    public static void main(String[] args) throws Exception {
        StringBuilder out = new StringBuilder();
        for (String name : args) {
            out.append("{\"file\":").append(json(name)).append(',');
            Properties props = new Properties();
            try (Reader reader = Files.newBufferedReader(Path.of(name), StandardCharsets.UTF_8)) {
                props.load(reader);
            } catch (IllegalArgumentException e) {
                String error = e.getClass().getName() + ": " + e.getMessage();
                out.append("\"error\":").append(json(error));
                out.append("}\n");
                continue;
            }
            out.append("\"props\":{");
            String sep = "";
            for (String key : new TreeSet<>(props.stringPropertyNames())) {
                out.append(sep).append(json(key)).append(':').append(json(props.getProperty(key)));
                sep = ",";
            }
            out.append("}}\n");
        }
        System.out.print(out);
    }

    static String json(String text) {
        StringBuilder s = new StringBuilder("\"");
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '"' || c == '\\') {
                s.append('\\').append(c);
            } else if (c >= 0x20 && c < 0x7f) {
                s.append(c);
            } else {
                s.append(String.format("\\u%04x", (int) c));
            }
        }
        return s.append('"').toString();
    }
}
