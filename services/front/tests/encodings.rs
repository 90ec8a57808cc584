//! End-to-end: text in the encodings agents meet (UTF-16, Shift_JIS,
//! EUC-JP, GBK, Big5, EUC-KR, windows-1251/1252), read, searched, grepped
//! and edited as text and kept in its own bytes; budgets in tokens.

// Tests may unwrap: a panic is the failure report.
#![allow(clippy::unwrap_used)]

use crate::support;

use std::time::{Duration, Instant};

use agentvfs_proto::v1 as pb;
use agentvfs_proto::v1::batch_action::Action;
use agentvfs_proto::v1::file_system_client::FileSystemClient;
use grep_matcher::Matcher;
use grep_regex::RegexMatcher;
use grep_searcher::sinks::UTF8;
use grep_searcher::{Encoding, SearcherBuilder};
use support::{Front, Stack, apply_batch, assert_error, metadata, read, replace, write_bytes, write_text};
use tonic::Code;
use tonic::transport::Channel;

/// Text in several scripts; every line names what it is, and the lines
/// with `needle` are the ones grep looks for.
const JAPANESE: &str = "吾輩は猫である。名前はまだ無い。\n\
どこで生れたかとんと見当がつかぬ。\n\
何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。\n\
needle: 吾輩はここで始めて人間というものを見た。\n\
しかもあとで聞くとそれは書生という人間中で一番獰悪な種族であったそうだ。\n";
const CHINESE: &str = "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。\n\
寒来暑往，秋收冬藏。闰余成岁，律吕调阳。\n\
needle: 云腾致雨，露结为霜。金生丽水，玉出昆冈。\n\
剑号巨阙，珠称夜光。果珍李柰，菜重芥姜。\n";
const TRADITIONAL: &str = "學而時習之，不亦說乎？有朋自遠方來，不亦樂乎？\n\
人不知而不慍，不亦君子乎？\n\
needle: 其為人也孝弟，而好犯上者，鮮矣。\n";
const KOREAN: &str = "다람쥐 헌 쳇바퀴에 타고파. 키스의 고유조건은 입술끼리 만나야 하고.\n\
needle: 동해 물과 백두산이 마르고 닳도록 하느님이 보우하사 우리나라 만세.\n\
무궁화 삼천리 화려 강산 대한 사람 대한으로 길이 보전하세.\n";
const RUSSIAN: &str = "Съешь же ещё этих мягких французских булок, да выпей чаю.\n\
В чащах юга жил бы цитрус? Да, но фальшивый экземпляр!\n\
needle: Широкая электрификация южных губерний даст мощный толчок подъёму сельского хозяйства.\n";
const FRENCH: &str = "Les naïfs ægithales hâtifs pondant à Noël où il gèle sont sûrs d'être déçus.\n\
needle: Voyez le brick géant que j'examine près du wharf.\n\
Falsches Üben von Xylophonmusik quält jeden größeren Zwerg.\n";

/// (path, encoding the file is in, its text).
fn corpus() -> Vec<(&'static str, &'static str, String)> {
    let crlf = |text: &str| text.replace('\n', "\r\n");
    vec![
        ("/ja/sjis.txt", "shift_jis", JAPANESE.to_owned()),
        ("/ja/sjis-crlf.txt", "shift_jis", crlf(JAPANESE)),
        ("/ja/eucjp.txt", "euc-jp", JAPANESE.to_owned()),
        ("/zh/gbk.txt", "gbk", CHINESE.to_owned()),
        ("/zh/big5.txt", "big5", TRADITIONAL.to_owned()),
        ("/ko/euckr.txt", "euc-kr", KOREAN.to_owned()),
        ("/ru/cp1251.txt", "windows-1251", RUSSIAN.to_owned()),
        ("/fr/cp1252-crlf.txt", "windows-1252", crlf(FRENCH)),
        ("/utf16/le.txt", "utf-16le", format!("\u{feff}{JAPANESE}")),
        ("/utf16/be-crlf.txt", "utf-16be", format!("\u{feff}{}", crlf(RUSSIAN))),
    ]
}

/// `text` in the encoding `label` names, as a file would hold it.
fn encode(label: &str, text: &str) -> Vec<u8> {
    let encoding = encoding_rs::Encoding::for_label(label.as_bytes()).unwrap();
    if encoding == encoding_rs::UTF_16LE || encoding == encoding_rs::UTF_16BE {
        let big_endian = encoding == encoding_rs::UTF_16BE;
        return text.encode_utf16().flat_map(|u| if big_endian { u.to_be_bytes() } else { u.to_le_bytes() }).collect();
    }
    let (bytes, _, unmappable) = encoding.encode(text);
    assert!(!unmappable, "{label} holds the text");
    bytes.into_owned()
}

async fn bytes(fs: &mut FileSystemClient<Channel>, path: &str) -> Vec<u8> {
    let request = pb::DownloadRequest { space: "s".into(), path: path.into(), ..Default::default() };
    let mut stream = fs.download(request).await.unwrap().into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = stream.message().await.unwrap() {
        out.extend_from_slice(&chunk.data);
    }
    out
}

/// A space `s` holding the corpus, each file as its encoded bytes.
async fn stocked(front: &Front) -> FileSystemClient<Channel> {
    front.space("s").await;
    let mut fs = front.fs().await;
    for (path, label, text) in corpus() {
        fs.write(write_bytes("s", path, &encode(label, &text))).await.unwrap();
    }
    fs
}

fn edit(path: &str, base: u64, edits: Vec<pb::TextEdit>) -> pb::EditRequest {
    pb::EditRequest { space: "s".into(), path: path.into(), base_version: Some(base), edits, ..Default::default() }
}

#[tokio::test]
async fn text_in_every_encoding_reads_as_its_text_and_says_its_encoding() {
    let front = Front::start().await;
    let mut fs = stocked(&front).await;
    for (path, label, text) in corpus() {
        let read = fs.read(read("s", path)).await.unwrap().into_inner();
        assert_eq!(read.content, text, "{path}");
        let info = read.text.unwrap();
        assert_eq!((info.encoding.as_str(), info.is_text, info.is_utf8), (label, true, false), "{path}");
        assert_eq!(info.bom, label.starts_with("utf-16"), "{path}");
        assert_eq!(info.line_count, text.lines().count() as u64, "{path}");
        assert_eq!(info.utf16_length, text.encode_utf16().count() as u64, "{path}");
        assert_eq!(read.mime_type, format!("text/plain; charset={label}"), "{path}");
        assert_eq!(read.size, encode(label, &text).len() as u64);
        // The bytes are kept as written.
        assert_eq!(bytes(&mut fs, path).await, encode(label, &text), "{path}");
    }
    let listed = support::tree(&mut fs, "s", 0).await;
    let sjis = listed.iter().find(|e| e.path == "/ja/sjis.txt").unwrap();
    assert_eq!((sjis.is_text, sjis.mime_type.as_str()), (true, "text/plain; charset=shift_jis"));
    // ReadMany and Diff see the text too.
    let reads = ["/zh/gbk.txt", "/ko/euckr.txt"].map(|p| read("s", p)).to_vec();
    let many = fs.read_many(pb::ReadManyRequest { space: "s".into(), reads, ..Default::default() }).await.unwrap();
    let contents: Vec<String> = many
        .into_inner()
        .results
        .into_iter()
        .map(|r| match r.outcome.unwrap() {
            pb::read_many_result::Outcome::Read(read) => read.content,
            pb::read_many_result::Outcome::Error(error) => panic!("{error:?}"),
        })
        .collect();
    assert_eq!(contents, [CHINESE, KOREAN]);
}

#[tokio::test]
async fn a_large_upload_in_another_encoding_is_text() {
    let front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    // Several upload batches, so that the upload is staged as it arrives.
    let text = JAPANESE.repeat(8_000);
    let data = encode("shift_jis", &text);
    assert!(data.len() > 1 << 20);
    let header = pb::UploadHeader { space: "s".into(), path: "/big-sjis.txt".into(), ..Default::default() };
    let mut messages = vec![pb::UploadChunk { part: Some(pb::upload_chunk::Part::Header(header)) }];
    let chunk = |c: &[u8]| pb::UploadChunk { part: Some(pb::upload_chunk::Part::Data(c.to_vec())) };
    messages.extend(data.chunks(100_000).map(chunk));
    fs.upload(tokio_stream::iter(messages)).await.unwrap();
    let read = fs.read(pb::ReadRequest { limit: 5, ..read("s", "/big-sjis.txt") }).await.unwrap().into_inner();
    assert_eq!(read.text.unwrap().encoding, "shift_jis");
    assert_eq!(read.content, JAPANESE);
    assert_eq!(read.total_lines, 40_000);
}

#[tokio::test]
async fn what_decodes_to_no_text_stays_binary() {
    let front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    let utf32 =
        [&[0xFF, 0xFE, 0, 0][..], &"text".chars().flat_map(|c| (c as u32).to_le_bytes()).collect::<Vec<_>>()].concat();
    let no_bom = encode("utf-16le", "text without a byte-order mark\n");
    let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01".to_vec();
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1).collect();
    for (path, body) in [("/utf32.txt", utf32), ("/no-bom.txt", no_bom), ("/a.png", png), ("/noise.bin", noise)] {
        fs.write(write_bytes("s", path, &body)).await.unwrap();
        let error = fs.read(read("s", path)).await.unwrap_err();
        assert_error(&error, Code::FailedPrecondition, "BINARY_CONTENT");
        let media = fs.read(pb::ReadRequest { media: true, ..read("s", path) }).await.unwrap().into_inner();
        assert_eq!(media.data, body, "{path} is still there, byte for byte");
    }
}

#[tokio::test]
async fn an_edit_is_written_back_in_the_files_encoding_keeping_every_other_byte() {
    let front = Front::start().await;
    let mut fs = stocked(&front).await;
    let swaps = [
        ("/ja/sjis.txt", "名前はまだ無い", "名前はもう有る"),
        ("/ja/sjis-crlf.txt", "猫である", "犬であった"),
        ("/ja/eucjp.txt", "書生", "ロボット"),
        ("/zh/gbk.txt", "秋收冬藏", "春种夏长"),
        ("/zh/big5.txt", "不亦說乎", "不亦樂乎"),
        ("/ko/euckr.txt", "만세", "만만세"),
        ("/ru/cp1251.txt", "булок", "пирожков"),
        ("/fr/cp1252-crlf.txt", "géant", "énorme"),
        ("/utf16/le.txt", "猫", "虎"),
        ("/utf16/be-crlf.txt", "цитрус", "лимон"),
    ];
    for ((path, label, text), (at, old, new)) in corpus().into_iter().zip(swaps) {
        assert_eq!(path, at);
        let edited = fs.edit(edit(path, 1, vec![replace(old, new)])).await.unwrap().into_inner();
        assert_eq!(edited.version, 2, "{path}");
        let want = text.replacen(old, new, 1);
        let stored = bytes(&mut fs, path).await;
        assert_eq!(stored, encode(label, &want), "{path}: the edit in {label}, nothing else changed");
        assert_eq!((edited.size, edited.hash.len()), (stored.len() as u64, 64));
        let read = fs.read(read("s", path)).await.unwrap().into_inner();
        assert_eq!((read.content.as_str(), read.text.unwrap().encoding.as_str()), (want.as_str(), label));
    }

    // A batch edit and an append keep the encoding too.
    let lines = pb::LinesEdit {
        start_line: 2,
        end_line: 2,
        old_text: "寒来暑往，春种夏长。闰余成岁，律吕调阳。\n".into(),
        new_text: "寒来暑往。\n".into(),
    };
    let batch_edit = Action::Edit(pb::EditAction {
        path: "/zh/gbk.txt".into(),
        edits: vec![pb::TextEdit { kind: Some(pb::text_edit::Kind::Lines(lines)) }],
        base_version: Some(2),
    });
    let batch = fs.batch(apply_batch("s", vec![batch_edit], "b")).await.unwrap().into_inner();
    assert!(batch.applied_changes, "{batch:?}");
    let append = pb::WriteRequest { mode: pb::WriteMode::Append as i32, ..write_text("s", "/zh/gbk.txt", "尾。\n") };
    fs.write(append).await.unwrap();
    let want = CHINESE.replacen("秋收冬藏", "春种夏长", 1).replacen(
        "寒来暑往，春种夏长。闰余成岁，律吕调阳。",
        "寒来暑往。",
        1,
    ) + "尾。\n";
    assert_eq!(bytes(&mut fs, "/zh/gbk.txt").await, encode("gbk", &want));
}

#[tokio::test]
async fn text_an_encoding_cannot_hold_is_refused_and_changes_nothing() {
    let front = Front::start().await;
    let mut fs = stocked(&front).await;
    let path = "/fr/cp1252-crlf.txt";
    let before = bytes(&mut fs, path).await;
    let error = fs.edit(edit(path, 1, vec![replace("géant", "géant 日本")])).await.unwrap_err();
    assert_error(&error, Code::FailedPrecondition, "UNREPRESENTABLE_TEXT");
    assert_eq!(
        (metadata(&error, "character").as_str(), metadata(&error, "encoding").as_str()),
        ("U+65E5", "windows-1252")
    );
    assert!(error.message().contains("'日'"), "{}", error.message());
    // A whole-file write keeps the encoding, and so is refused the same way…
    let error = fs.write(write_text("s", path, "café ☕\n")).await.unwrap_err();
    assert_error(&error, Code::FailedPrecondition, "UNREPRESENTABLE_TEXT");
    let batch = Action::Edit(pb::EditAction {
        path: path.into(),
        edits: vec![replace("wharf", "埠頭")],
        base_version: Some(1),
    });
    let outcome = fs.batch(apply_batch("s", vec![batch], "b")).await.unwrap().into_inner();
    assert!(!outcome.applied_changes);
    assert_eq!(outcome.outcomes[0].error.as_ref().unwrap().reason, "UNREPRESENTABLE_TEXT");
    assert_eq!(bytes(&mut fs, path).await, before);
    let versions = fs.read(read("s", path)).await.unwrap().into_inner().version;
    assert_eq!(versions, 1, "nothing was written");
    // …unless it names another encoding: then the file is converted.
    let converted = pb::WriteRequest { encoding: "utf-8".into(), ..write_text("s", path, "café ☕\n") };
    fs.write(converted).await.unwrap();
    let read = fs.read(read("s", path)).await.unwrap().into_inner();
    assert_eq!((read.content.as_str(), read.text.unwrap().encoding.as_str()), ("café ☕\n", "utf-8"));
}

#[tokio::test]
async fn a_write_may_name_the_encoding_to_store_text_in() {
    let front = Front::start().await;
    front.space("s").await;
    let mut fs = front.fs().await;
    for (label, stored) in
        [("shift_jis", "shift_jis"), ("GB18030", "gb18030"), ("utf-16le", "utf-16le"), ("latin1", "windows-1252")]
    {
        let path = format!("/{stored}.txt");
        let text = if stored == "windows-1252" { "Noël à Paris\n" } else { "データ 数据\n" };
        fs.write(pb::WriteRequest { encoding: label.into(), ..write_text("s", &path, text) }).await.unwrap();
        let want = if stored == "utf-16le" { encode(stored, &format!("\u{feff}{text}")) } else { encode(stored, text) };
        assert_eq!(bytes(&mut fs, &path).await, want, "{label}: UTF-16 gets its byte-order mark");
        let read = fs.read(read("s", &path)).await.unwrap().into_inner();
        assert_eq!(read.text.unwrap().encoding, stored);
        assert!(read.content.ends_with(text));
    }
    for label in ["utf-32", "klingon"] {
        let error = fs.write(pb::WriteRequest { encoding: label.into(), ..write_text("s", "/x.txt", "x") }).await;
        let error = error.unwrap_err();
        assert_error(&error, Code::InvalidArgument, "INVALID_ARGUMENT");
        assert!(error.message().contains("shift_jis"), "lists some valid labels: {}", error.message());
    }
    let bytes_and_label = pb::WriteRequest { encoding: "gbk".into(), ..write_bytes("s", "/x.bin", b"x") };
    assert_error(&fs.write(bytes_and_label).await.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
}

/// The matches ripgrep's machinery reports for `pattern` in `bytes` decoded
/// from `label`, as `rg --encoding LABEL` does (grep-searcher transcoding
/// through encoding_rs_io): (line number, UTF-16 column, line).
fn oracle(pattern: &str, label: &str, bytes: &[u8]) -> Vec<(u64, u64, String)> {
    let matcher = RegexMatcher::new(pattern).unwrap();
    let mut searcher = SearcherBuilder::new()
        .encoding(Some(Encoding::new(label).unwrap()))
        .bom_sniffing(false)
        .line_number(true)
        .build();
    let mut out = Vec::new();
    searcher
        .search_slice(
            &matcher,
            bytes,
            UTF8(|number, line| {
                let line = line.strip_suffix('\n').unwrap_or(line);
                let line = line.strip_suffix('\r').unwrap_or(line);
                let start = matcher.find(line.as_bytes()).unwrap().unwrap().start();
                out.push((number, line[..start].encode_utf16().count() as u64 + 1, line.to_owned()));
                Ok(true)
            }),
        )
        .unwrap();
    out
}

#[tokio::test]
async fn grep_searches_the_decoded_text_as_ripgrep_does() {
    let stack = Stack::start(&[]).await;
    let mut fs = stocked(&stack.front).await;
    for pattern in ["needle", "人間|губерний|만세|金生丽水|géant", r"\p{Han}{4}"] {
        let request = pb::GrepRequest {
            space: "s".into(),
            pattern: pattern.into(),
            output_mode: pb::GrepOutputMode::Content as i32,
            head_limit: Some(1_000),
            ..Default::default()
        };
        let matches = fs.grep(request).await.unwrap().into_inner().matches;
        for (path, label, text) in corpus() {
            let got: Vec<(u64, u64, String)> = matches
                .iter()
                .filter(|m| m.path == path)
                .map(|m| (m.line_number, m.column, m.line.trim_end_matches(['\r', '\n']).to_owned()))
                .collect();
            // The byte-order mark is text like any other: ripgrep keeps it without BOM sniffing.
            let want = oracle(pattern, label, &encode(label, &text));
            assert_eq!(got, want, "{pattern} in {path}");
        }
    }
    let needles = fs.grep(pb::GrepRequest { space: "s".into(), pattern: "needle".into(), ..Default::default() });
    assert_eq!(needles.await.unwrap().into_inner().files.len(), corpus().len(), "every file has its needle");
}

#[tokio::test]
async fn search_finds_words_of_decoded_text() {
    let stack = Stack::start(&[]).await;
    let mut fs = stocked(&stack.front).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    for (word, path) in
        [("булок", "/ru/cp1251.txt"), ("examine", "/fr/cp1252-crlf.txt"), ("ægithales", "/fr/cp1252-crlf.txt")]
    {
        loop {
            let request = pb::SearchRequest { space: "s".into(), query: word.into(), ..Default::default() };
            let hits = fs.search(request).await.unwrap().into_inner().hits;
            if hits.iter().any(|h| h.path == path) {
                break;
            }
            assert!(Instant::now() < deadline, "{word} was not found in {path}: {hits:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Reads `path` page by page under `max_tokens`, checking each page.
async fn token_pages(fs: &mut FileSystemClient<Channel>, path: &str, max_tokens: u64, tokenizer: &str) -> Vec<String> {
    let mut pages = Vec::new();
    let (mut offset, mut start_char) = (1, 0);
    loop {
        let request =
            pb::ReadRequest { offset, start_char, max_tokens, tokenizer: tokenizer.into(), ..read("s", path) };
        let page = fs.read(request).await.unwrap().into_inner();
        assert!(page.tokens <= max_tokens, "{path}: a page of {} tokens under {max_tokens}", page.tokens);
        assert!(!page.content.is_empty(), "every page makes progress");
        pages.push(page.content);
        match page.next {
            Some(next) => (offset, start_char) = (next.start_line, next.start_char),
            None => return pages,
        }
    }
}

#[tokio::test]
async fn pages_in_tokens_fit_their_budget_and_make_up_the_file() {
    let front = Front::start().await;
    let mut fs = stocked(&front).await;
    let long_line = format!("{}\n", "トークン化の長い一行。".repeat(40));
    fs.write(write_text("s", "/long.txt", &format!("short\n{long_line}tail\n"))).await.unwrap();
    for (path, max_tokens, tokenizer) in
        [("/ja/sjis.txt", 40, ""), ("/ru/cp1251.txt", 25, "cl100k_base"), ("/long.txt", 16, "o200k_base")]
    {
        let whole = fs.read(read("s", path)).await.unwrap().into_inner().content;
        let pages = token_pages(&mut fs, path, max_tokens, tokenizer).await;
        assert!(pages.len() > 1, "{path} takes several pages of {max_tokens} tokens");
        assert_eq!(pages.concat(), whole, "{path}");
        // A page ends inside a line only when that line alone is over the budget.
        let cut = |page: &String| !page.ends_with('\n') && page.contains('\n');
        assert!(!pages.iter().any(cut), "{path}: pages end at line ends: {pages:?}");
    }
    // A budget that holds the file reports its tokens; a bad one is refused.
    let all = fs.read(pb::ReadRequest { max_tokens: 10_000, ..read("s", "/long.txt") }).await.unwrap().into_inner();
    assert!(all.next.is_none() && all.tokens > 16);
    for (max_tokens, tokenizer) in [(3, ""), (100, "gpt2")] {
        let request = pb::ReadRequest { max_tokens, tokenizer: tokenizer.into(), ..read("s", "/long.txt") };
        assert_error(&fs.read(request).await.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
    }
    // ReadMany shares its budget in tokens.
    let reads = ["/ja/sjis.txt", "/zh/gbk.txt", "/ko/euckr.txt"].map(|p| read("s", p)).to_vec();
    let request = pb::ReadManyRequest { space: "s".into(), reads, max_tokens: 120, ..Default::default() };
    let many = fs.read_many(request).await.unwrap().into_inner();
    let spent: u64 = many
        .results
        .iter()
        .filter_map(|r| match r.outcome.as_ref().unwrap() {
            pb::read_many_result::Outcome::Read(read) => Some(read.tokens),
            pb::read_many_result::Outcome::Error(_) => None,
        })
        .sum();
    assert!(spent <= 120 && spent > 60, "{spent}");
    assert!(many.incomplete);
}

#[tokio::test]
async fn grep_pages_in_tokens_hold_every_match_once() {
    let stack = Stack::start(&[]).await;
    let mut fs = stocked(&stack.front).await;
    let request = |max_tokens: u64, page_token: String| pb::GrepRequest {
        space: "s".into(),
        pattern: r"\p{Han}|\p{Cyrillic}|\p{Hangul}".into(),
        output_mode: pb::GrepOutputMode::Content as i32,
        context: 1,
        max_tokens,
        page_token,
        ..Default::default()
    };
    let whole = fs.grep(request(0, String::new())).await.unwrap().into_inner();
    assert!(whole.complete && whole.tokens == 0);
    let key = |m: &pb::GrepMatch| (m.path.clone(), m.line_number);
    let (mut paged, mut pages, mut token) = (Vec::new(), 0, String::new());
    loop {
        let page = fs.grep(request(150, token)).await.unwrap().into_inner();
        let counted: u64 = page.matches.iter().map(|m| m.line.chars().count() as u64).sum();
        assert!(
            page.tokens <= 150 || page.matches.len() == 1,
            "{} tokens in {} matches",
            page.tokens,
            page.matches.len()
        );
        assert!(page.tokens > 0 && counted > 0);
        paged.extend(page.matches.iter().map(key));
        pages += 1;
        if page.complete {
            break;
        }
        token = page.next_page_token;
    }
    assert!(pages > 2, "{pages} pages");
    assert_eq!(paged, whole.matches.iter().map(key).collect::<Vec<_>>());
    let files =
        pb::GrepRequest { output_mode: pb::GrepOutputMode::FilesWithMatches as i32, ..request(150, String::new()) };
    assert_error(&fs.grep(files).await.unwrap_err(), Code::InvalidArgument, "INVALID_ARGUMENT");
}
