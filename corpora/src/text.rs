//! Template filling: `{key}` slots, subject forms that vary from sentence to sentence,
//! vocabulary lists for background sentences, and small English helpers.

use crate::rng::Dice;

/// How an entity is referred to in one sentence.
pub(crate) struct Form {
    /// Sentence-initial subject ("Varnoka Teluvi", "She", "The town").
    pub s_cap: String,
    /// Subject inside a sentence ("she", "the town").
    pub s: String,
    /// Possessive, capitalised and not ("Her", "her", "Osmarde's").
    pub p_cap: String,
    pub p: String,
    /// Object ("her", "the town").
    pub o: String,
}

/// The ways one entity can be referred to; index 0 is the full name, `pronoun` the
/// form used for second and later mentions in a sentence.
pub(crate) struct Forms {
    pub forms: Vec<Form>,
    pub weights: Vec<u32>,
    pub pronoun: usize,
}

pub(crate) fn capitalise(w: &str) -> String {
    let mut c = w.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

pub(crate) fn possessive(name: &str) -> String {
    if name.ends_with('s') {
        format!("{name}'")
    } else {
        format!("{name}'s")
    }
}

pub(crate) fn article(word: &str) -> &'static str {
    match word.as_bytes().first() {
        Some(b'a' | b'e' | b'i' | b'o' | b'u' | b'A' | b'E' | b'I' | b'O' | b'U') => "an",
        _ => "a",
    }
}

/// 48200 -> "48,200".
pub(crate) fn thousands(n: u32) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn word_count(text: &str) -> usize {
    text.split_whitespace().count()
}

/// Names of other entities a background sentence may mention.
pub(crate) struct Others<'a> {
    pub cities: &'a [String],
    pub persons: &'a [String],
    pub provinces: &'a [String],
}

/// Fills `{key}` slots. Lookup order: fixed slots, subject forms (`S s Ps ps o`),
/// other entities (`other_city`, `other_person`, `other_province`, optionally with a
/// digit suffix), vocabulary lists (a digit suffix draws a different word from the
/// same list), and `a_KEY` for KEY with its indefinite article.
pub(crate) struct Filler<'a> {
    pub fixed: &'a [(&'static str, String)],
    pub forms: &'a Forms,
    pub others: &'a Others<'a>,
    /// Own name, never picked as an "other" entity.
    pub own: &'a str,
}

impl<'a> Filler<'a> {
    /// Fills a template; `form` is the form of the first subject slot (`None`: random).
    pub(crate) fn fill(&self, dice: &mut Dice, template: &str, form: Option<usize>) -> String {
        let mut out = String::with_capacity(template.len() + 32);
        let mut used: Vec<String> = Vec::new();
        let mut subject_seen = false;
        let form = form.unwrap_or_else(|| dice.weighted(&self.forms.weights));
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let close = open + rest[open..].find('}').expect("unclosed slot in template");
            let key = &rest[open + 1..close];
            let value = self.resolve(dice, key, &mut used, form, &mut subject_seen);
            out.push_str(&value);
            rest = &rest[close + 1..];
        }
        out.push_str(rest);
        capitalise(&out)
    }

    fn resolve(
        &self,
        dice: &mut Dice,
        key: &str,
        used: &mut Vec<String>,
        form: usize,
        subject_seen: &mut bool,
    ) -> String {
        if let Some(inner) = key.strip_prefix("a_") {
            let v = self.resolve(dice, inner, used, form, subject_seen);
            return format!("{} {v}", article(&v));
        }
        if let Some((_, v)) = self.fixed.iter().find(|(k, _)| *k == key) {
            return v.clone();
        }
        if matches!(key, "S" | "s" | "Ps" | "ps" | "o") {
            let f = &self.forms.forms[if *subject_seen {
                self.forms.pronoun
            } else {
                form
            }];
            *subject_seen = true;
            return match key {
                "S" => f.s_cap.clone(),
                "s" => f.s.clone(),
                "Ps" => f.p_cap.clone(),
                "ps" => f.p.clone(),
                _ => f.o.clone(),
            };
        }
        let base = key.trim_end_matches(|c: char| c.is_ascii_digit());
        let draw = |dice: &mut Dice| -> &'a str {
            match base {
                "other_city" => dice.pick(self.others.cities).as_str(),
                "other_person" => dice.pick(self.others.persons).as_str(),
                "other_province" => dice.pick(self.others.provinces).as_str(),
                _ => dice
                    .word(vocab(base).unwrap_or_else(|| panic!("unknown template slot {{{key}}}"))),
            }
        };
        // A few tries for a word not used in this sentence and not our own name.
        let mut v = draw(dice);
        for _ in 0..8 {
            if v != self.own && !used.iter().any(|u| u == v) {
                break;
            }
            v = draw(dice);
        }
        used.push(v.to_string());
        v.to_string()
    }
}

/// Vocabulary of the background sentences and leads.
fn vocab(key: &str) -> Option<&'static [&'static str]> {
    Some(match key {
        "adjp" => &[
            "celebrated",
            "little-known",
            "prolific",
            "self-taught",
            "meticulous",
            "restless",
            "influential",
            "reclusive",
            "versatile",
            "controversial",
            "gifted",
            "respected",
        ],
        "trait" => &[
            "patient",
            "quarrelsome",
            "generous",
            "stubborn",
            "witty",
            "reserved",
            "ambitious",
            "absent-minded",
            "charming",
            "severe",
            "curious",
            "cheerful",
            "melancholy",
        ],
        "edu_adj" => &[
            "irregular",
            "strict",
            "brief",
            "unusually broad",
            "largely informal",
        ],
        "teacher" => &[
            "an elderly neighbour",
            "a travelling bookseller",
            "an uncle who kept bees",
            "the village schoolmistress",
            "a retired ship's captain",
            "a local apothecary",
        ],
        "sketch" => &[
            "harbour scenes",
            "wild flowers",
            "church towers",
            "market crowds",
            "cloud formations",
            "old machinery",
            "river boats",
            "mountain huts",
        ],
        "work_pl" => &[
            "notebooks",
            "drawings",
            "manuscripts",
            "instruments",
            "letters",
            "models",
            "maps",
            "paintings",
        ],
        "habit" => &[
            "working through the night",
            "long solitary walks",
            "an extraordinary memory for faces",
            "a refusal to sign contracts",
            "a strict daily routine",
            "lavish hospitality",
            "wearing the same grey coat",
        ],
        "monument" => &[
            "plaque",
            "small statue",
            "memorial bench",
            "stained-glass window",
            "bronze bust",
        ],
        "pastime" => &[
            "chess",
            "sailing",
            "gardening",
            "card games",
            "folk music",
            "fishing",
            "long country walks",
            "riddles",
        ],
        "shop" => &[
            "bakery",
            "cooper's workshop",
            "tailor's shop",
            "bookshop",
            "pharmacy",
            "tavern",
        ],
        "num_word" => &[
            "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
            "twelve",
        ],
        "source" => &[
            "parish registers",
            "a handful of surviving letters",
            "old tax rolls",
            "an unpublished memoir",
            "newspaper notices",
            "the minutes of local councils",
        ],
        "genre" => &["biography", "history", "pamphlet", "memoir", "study"],
        "disaster" => &[
            "a great fire",
            "a severe flood",
            "a long siege",
            "an outbreak of fever",
            "an earthquake",
            "a hard winter",
        ],
        "building_pl" => &[
            "timber-framed houses",
            "arcaded shops",
            "stone warehouses",
            "painted gables",
            "old chapels",
            "merchant halls",
        ],
        "street_pl" => &["lanes", "alleys", "stairways", "courtyards"],
        "festival" => &[
            "lantern festival",
            "horse fair",
            "music festival",
            "harvest market",
            "boat race",
            "cheese fair",
        ],
        "season" => &["spring", "summer", "autumn", "winter"],
        "trade" => &[
            "fishing",
            "salt trading",
            "weaving",
            "timber",
            "tanning",
            "glassmaking",
            "brewing",
            "wool",
            "stone quarrying",
            "pottery",
            "shipbuilding",
            "tourism",
        ],
        "material" => &[
            "oak",
            "grey granite",
            "limestone",
            "brick",
            "iron",
            "brass",
            "copper",
            "polished walnut",
            "bronze",
        ],
        "bridge_adj" => &["narrow", "seven-arched", "covered", "humpbacked", "wide"],
        "crop" => &["barley", "rye", "flax", "hop", "sunflower", "potato", "oat"],
        "landscape" => &[
            "rolling pasture",
            "dense forest",
            "marshland",
            "terraced vineyards",
            "open heath",
            "limestone hills",
            "birch woods",
        ],
        "name_origin" => &[
            "a legendary ferryman",
            "an old word for a ford",
            "the family that first farmed the land",
            "a spring said to cure fevers",
            "a shepherd's song",
        ],
        "custom" => &[
            "elaborate embroidery",
            "a distinctive dialect",
            "spiced bread",
            "choral singing",
            "carved wooden signs",
        ],
        "building" => &[
            "former granary",
            "converted chapel",
            "half-timbered hall",
            "brick tower",
        ],
        "dir" => &["north", "south", "east", "west", "north-east", "south-west"],
        "winter" => &[
            "long and snowy",
            "mild and wet",
            "cold and dry",
            "short but harsh",
        ],
        "summer" => &["warm", "hot and dusty", "cool and rainy", "brief"],
        "fish" => &["trout", "pike", "eels", "salmon", "carp", "perch"],
        "mill_pl" => &["watermills", "sawmills", "fulling mills", "paper mills"],
        "meaning" => &[
            "swift water",
            "grey stone",
            "the willow",
            "bend",
            "the shallow place",
            "silver",
        ],
        "boat_pl" => &[
            "flat-bottomed punts",
            "narrow skiffs",
            "reed boats",
            "barges",
        ],
        "rscene" => &[
            "willow-lined banks",
            "steep gorges",
            "quiet backwaters",
            "reed beds",
        ],
        "topic" => &[
            "regional trade",
            "public health",
            "the state of the fisheries",
            "coastal surveys",
            "literacy",
        ],
        "doc_pl" => &[
            "ledgers",
            "letters",
            "maps",
            "contracts",
            "photographs",
            "ship manifests",
        ],
        "hardship" => &[
            "debts",
            "quarrels among its members",
            "a lawsuit over its name",
            "the loss of its first premises to fire",
        ],
        "members" => &[
            "master craftsmen",
            "ship owners",
            "graduates of a single school",
            "residents of one parish",
        ],
        "virtue" => &[
            "its charitable work",
            "the quality of its publications",
            "its training of apprentices",
            "its careful accounts",
        ],
        "vice" => &[
            "its secrecy",
            "its slowness to admit women",
            "its high fees",
            "its caution",
        ],
        "emblem" => &[
            "silver anchor",
            "crowned heron",
            "pair of crossed keys",
            "rising sun",
            "black lantern",
            "green oak leaf",
        ],
        "prize_topic" => &[
            "young engravers",
            "services to navigation",
            "new methods of bookkeeping",
            "local history",
        ],
        "part" => &[
            "brass gear",
            "spring-loaded catch",
            "second lens",
            "leather seal",
            "weighted pendulum",
            "copper coil",
            "ratchet",
        ],
        "museum_topic" => &[
            "science",
            "industry",
            "local history",
            "navigation",
            "crafts",
        ],
        "operate_feat" => &[
            "finish a day's work in a few hours",
            "achieve remarkable precision",
            "work safely in poor light",
        ],
        "maint" => &[
            "regular oiling",
            "careful cleaning",
            "frequent replacement of its seals",
        ],
        "goods" => &[
            "honey and candles",
            "woollen goods",
            "dried fish",
            "painted pottery",
            "fresh cheese",
        ],
        "school" => &["grammar school", "music school", "seminary"],
        "cquality" => &[
            "quiet charm",
            "steep streets",
            "crowded harbour",
            "clean air",
            "noisy markets",
        ],
        "cadj" => &[
            "quiet",
            "busy",
            "small",
            "prosperous",
            "picturesque",
            "historic",
            "old",
        ],
        "cfeature" => &[
            "old stone bridge",
            "covered market",
            "clock tower",
            "spring fair",
            "lace-making",
            "smoked fish",
            "botanical garden",
            "painted houses",
        ],
        "padj" => &[
            "mountainous",
            "fertile",
            "sparsely populated",
            "lake-strewn",
            "rugged",
            "low-lying",
        ],
        "pfeature" => &[
            "mountain passes",
            "orchards",
            "mineral springs",
            "horse breeding",
            "lakes",
            "salt marshes",
        ],
        "radj" => &["slow", "swift", "winding", "broad", "shallow", "clear"],
        "rfeature" => &[
            "clear water",
            "steep gorges",
            "spring floods",
            "wide meadows",
            "waterfalls",
        ],
        "rtrade" => &["timber rafts", "grain barges", "salt boats", "pilgrims"],
        "iadj" => &[
            "hand-operated",
            "compact",
            "ingenious",
            "portable",
            "mechanical",
            "heavy",
        ],
        "family_trade" => &[
            "millers",
            "fishermen",
            "clockmakers",
            "weavers",
            "small farmers",
            "schoolteachers",
            "innkeepers",
        ],
        "childhood" => &[
            "modest circumstances",
            "a crowded household",
            "comfortable surroundings",
            "the care of a grandmother",
        ],
        "year_event" => &[
            "poor harvests",
            "heavy snowfall",
            "unusual floods",
            "political unrest",
        ],
        "heir" => &[
            "a nephew",
            "the town library",
            "a former pupil",
            "a learned society",
            "a younger sister",
        ],
        "death_cause" => &[
            "a short illness",
            "a fall",
            "years of failing health",
            "a winter fever",
        ],
        "workname" => &[
            "Papers",
            "Atlas",
            "Notebooks",
            "Suite",
            "Survey",
            "Letters",
            "Sketches",
            "Tables",
        ],
        "workdesc" => &[
            "work that took several years",
            "project later praised by critics",
            "commission that was never paid in full",
            "piece long thought lost",
        ],
        "origin" => &[
            "river crossing",
            "fortified mill",
            "monastery",
            "trading post",
            "ferry station",
            "toll house",
        ],
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(thousands(7), "7");
        assert_eq!(thousands(1_250), "1,250");
        assert_eq!(thousands(48_200), "48,200");
        assert_eq!(thousands(900_000), "900,000");
        assert_eq!(article("engraver"), "an");
        assert_eq!(article("surveyor"), "a");
        assert_eq!(possessive("Osmarde"), "Osmarde's");
        assert_eq!(possessive("Varis"), "Varis'");
        assert_eq!(capitalise("the town"), "The town");
    }
}
