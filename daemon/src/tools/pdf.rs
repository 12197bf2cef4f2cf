//! PDF documents for Read: how many pages a file has, and a range of its pages cut out as a
//! PDF of its own (`pages: "3"`, `"1-5"`), so a long document is read in parts as in Claude
//! Code. The only module that names lopdf.

/// Most pages one Read sends.
pub const MAX_PAGES_PER_READ: u32 = 20;
/// A PDF with more pages needs `pages`.
pub const MAX_WHOLE_PAGES: u32 = 10;

/// The pages `range` names (`"3"`, `"1-5"`), 1-based and inclusive.
pub fn parse_range(range: &str) -> Result<(u32, u32), String> {
    let bad = || format!("pages {range:?} is not a page or a range like \"1-5\"");
    let (first, last) = match range.trim().split_once('-') {
        Some((a, b)) => (a.trim(), b.trim()),
        None => (range.trim(), range.trim()),
    };
    let first: u32 = first.parse().map_err(|_| bad())?;
    let last: u32 = last.parse().map_err(|_| bad())?;
    if first == 0 || last < first {
        return Err(bad());
    }
    Ok((first, last))
}

/// A parsed PDF.
pub struct Pdf(lopdf::Document);

impl Pdf {
    /// Parses `bytes`; the error says why it is not a readable PDF.
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let doc = lopdf::Document::load_mem(bytes).map_err(|e| e.to_string())?;
        if doc.is_encrypted() {
            return Err("it is encrypted".into());
        }
        Ok(Self(doc))
    }

    /// How many pages it has.
    pub fn pages(&self) -> u32 {
        self.0.get_pages().len() as u32
    }

    /// A PDF of pages `first..=last` alone.
    pub fn extract(mut self, first: u32, last: u32) -> Result<Vec<u8>, String> {
        let drop: Vec<u32> = self
            .0
            .get_pages()
            .keys()
            .copied()
            .filter(|p| *p < first || *p > last)
            .collect();
        self.0.delete_pages(&drop);
        self.0.prune_objects();
        let mut out = Vec::new();
        self.0.save_to(&mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PDF of `n` pages, each saying its number.
    pub fn sample(n: u32) -> Vec<u8> {
        use lopdf::{Document, Object, Stream, dictionary};
        let mut doc = Document::with_version("1.5");
        let pages_id = doc.new_object_id();
        let font = doc.add_object(dictionary! {
            "Type" => "Font", "Subtype" => "Type1", "BaseFont" => "Helvetica",
        });
        let mut kids = Vec::new();
        for i in 1..=n {
            let text = format!("BT /F1 24 Tf 72 720 Td (Page {i}) Tj ET");
            let content = doc.add_object(Stream::new(dictionary! {}, text.into_bytes()));
            let page = doc.add_object(dictionary! {
                "Type" => "Page",
                "Parent" => pages_id,
                "Contents" => content,
                "Resources" => dictionary! { "Font" => dictionary! { "F1" => font } },
                "MediaBox" => vec![0.into(), 0.into(), 612.into(), 792.into()],
            });
            kids.push(Object::Reference(page));
        }
        doc.objects.insert(
            pages_id,
            Object::Dictionary(dictionary! {
                "Type" => "Pages", "Kids" => kids, "Count" => n as i64,
            }),
        );
        let catalog = doc.add_object(dictionary! { "Type" => "Catalog", "Pages" => pages_id });
        doc.trailer.set("Root", catalog);
        let mut out = Vec::new();
        doc.save_to(&mut out).expect("save");
        out
    }

    #[test]
    fn a_range_of_pages_is_a_pdf_of_its_own() {
        let pdf = Pdf::parse(&sample(12)).expect("parse");
        assert_eq!(pdf.pages(), 12);
        let part = pdf.extract(3, 5).expect("extract");
        let part = Pdf::parse(&part).expect("parse the part");
        assert_eq!(part.pages(), 3);
    }

    #[test]
    fn ranges_are_checked() {
        assert_eq!(parse_range("3"), Ok((3, 3)));
        assert_eq!(parse_range(" 1 - 5 "), Ok((1, 5)));
        assert!(parse_range("0-2").is_err());
        assert!(parse_range("5-1").is_err());
        assert!(parse_range("a").is_err());
        assert!(Pdf::parse(b"not a pdf").is_err());
    }
}
