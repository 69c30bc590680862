// Records both variants must agree on, run by `src/record.rs`'s unit test (the WATCH
// variant's decoder) and by `tests/records.rs` (both variants on a real server). Included
// with `include!`, so: items only.

/// Refused by both as `Corrupt`.
const INVALID_RECORDS: &[&str] = &[
    "",
    "v2|held|a|1|1|1|1|{}",
    "v1|gone|a|1|1|1|1|{}",
    "v1|HELD|a|1|1|1|1|{}",
    "v1|held|a|x|1|1|1|{}",
    "v1|held|a|1",
    "v1|held|a|+12|1|1|1|{}",
    "v1|held|a|-1|1|1|1|{}",
    "v1|held|a| 1|1|1|1|{}",
    "v1|held|not-hex|1|1|1|1|{}",
    "v1|held|a|12345678901234567|1|1|1|{}",
    "v1|held|a|1|4294967296|1|1|{}",
    "v1|held|a|1|1|1|99999999999999999|{}",
    "v1|held|a|1||1|1|{}",
    "v2|",
    "v2|{}",
    "v2|[]",
    "v2|{\"fencing\":1,\"state\":\"gone\"}",
    "v2|{\"fencing\":-1,\"state\":\"free\"}",
    "v2|{\"fencing\":1.5,\"state\":\"free\"}",
    "v2|{\"fencing\":12345678901234567,\"state\":\"free\"}",
    "v2|{\"fencing\":1,\"state\":\"cooling\"}",
    "v2|{\"fencing\":1,\"state\":\"held\",\"hold\":{\"token\":\"zz\",\"holder\":\"{}\",\"holds\":1,\"expires\":1,\"forget\":1}}",
    "v2|{\"fencing\":1,\"state\":\"held\",\"hold\":{\"token\":\"ab\",\"holder\":\"{}\",\"holds\":4294967296,\"expires\":1,\"forget\":1}}",
    "v2|{\"fencing\":1,\"state\":\"shared\",\"capacity\":2,\"holds\":[]}",
    "v2|{\"fencing\":1,\"state\":\"shared\",\"capacity\":2,\"holds\":[{\"token\":\"ab\",\"holder\":\"{}\",\"holds\":1,\"expires\":1,\"forget\":1,\"fencing\":1}]}",
    "v2|{\"fencing\":1,\"state\":\"free\",\"writer\":{\"token\":\"not hex\",\"until\":1}}",
];

/// Read by both (expires and forget far in the future, so `held` reads as held).
const VALID_RECORDS: &[&str] = &[
    "v1|free||12|0|0|9999999999999|",
    "v1|cooling||12|0|9999999999999|9999999999999|",
    "v1|held|ab12|1795000000000001|2|9999999999999|9999999999999|{\"host\":\"a|b\",\"pid\":1}",
    "v1|held|AB12|7|4294967295|9999999999999|9999999999999|{\"host\":\"h\",\"pid\":1}",
    "v2|{\"fencing\":12,\"state\":\"free\"}",
    "v2|{\"fencing\":12,\"state\":\"cooling\",\"until\":9999999999999,\"writer\":null}",
    "v2|{\"fencing\":12,\"state\":\"held\",\"hold\":{\"token\":\"ab\",\"holder\":\"{\\\"host\\\":\\\"h\\\",\\\"pid\\\":1}\",\"holds\":2,\"expires\":9999999999999,\"forget\":9999999999999},\"writer\":{\"token\":\"cd\",\"until\":9999999999999}}",
    "v2|{\"fencing\":1795000000000001,\"state\":\"shared\",\"capacity\":4294967295,\"holds\":[{\"token\":\"ab\",\"holder\":\"{\\\"host\\\":\\\"a|b\\\",\\\"pid\\\":1}\",\"holds\":1,\"expires\":9999999999999,\"forget\":9999999999999,\"fencing\":1795000000000001,\"weight\":1}]}",
];
