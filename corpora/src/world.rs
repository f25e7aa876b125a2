//! The invented world: entities and the links between them, before any text is written.

use crate::names::Namer;
use crate::rng::Dice;

pub(crate) const OCCUPATIONS: &[&str] = &[
    "cartographer",
    "glassblower",
    "astronomer",
    "shipwright",
    "composer",
    "botanist",
    "physician",
    "engraver",
    "surveyor",
    "linguist",
    "poet",
    "architect",
    "clockmaker",
    "chemist",
    "weaver",
    "mathematician",
    "painter",
    "naturalist",
    "bookbinder",
    "diplomat",
    "sculptor",
    "historian",
    "engineer",
    "philosopher",
    "printer",
    "navigator",
];

/// Organisation kinds: (title suffix, common noun, description for the lead sentence).
pub(crate) const ORG_KINDS: &[(&str, &str, &str)] = &[
    (
        "Trading Company",
        "company",
        "a merchant house dealing in salt, timber and wool",
    ),
    (
        "Shipyards",
        "shipyard",
        "a builder of coastal sailing vessels and river barges",
    ),
    (
        "Institute",
        "institute",
        "a research institute devoted to the study of soils and weather",
    ),
    (
        "Press",
        "press",
        "a publishing house known for its atlases and almanacs",
    ),
    (
        "Observatory",
        "observatory",
        "an astronomical observatory and school of navigation",
    ),
    (
        "Savings Bank",
        "bank",
        "a savings bank serving farmers and small traders",
    ),
    (
        "Glassworks",
        "glassworks",
        "a maker of window glass, bottles and lenses",
    ),
    (
        "Learned Society",
        "society",
        "a learned society that meets to discuss the natural sciences",
    ),
    (
        "Conservatory",
        "conservatory",
        "a school of music with its own orchestra",
    ),
    (
        "Brewery",
        "brewery",
        "a brewery whose dark ales are sold across the region",
    ),
    (
        "Foundry",
        "foundry",
        "an iron foundry casting bells, pipes and machine parts",
    ),
    (
        "Mapping Office",
        "office",
        "a survey office that produces official maps",
    ),
];

/// Inventions: (common noun, what it is used for).
pub(crate) const DEVICES: &[(&str, &str)] = &[
    ("loom", "weaving patterned cloth"),
    ("lamp", "lighting mine galleries"),
    ("press", "printing coloured maps"),
    ("pump", "draining flooded fields"),
    ("telescope", "observing faint comets"),
    ("clock", "keeping time at sea"),
    ("kiln", "firing glazed tiles"),
    ("sextant", "measuring the height of stars"),
    ("engine", "driving mill wheels"),
    ("balance", "weighing precious metals"),
    ("lens", "correcting weak eyesight"),
    ("valve", "regulating steam pressure"),
    ("plough", "breaking heavy clay soil"),
    ("crane", "lifting cargo from ships"),
    ("still", "distilling medicinal oils"),
    ("barometer", "forecasting storms"),
    ("cipher wheel", "encoding secret letters"),
    ("bellows", "ventilating deep mines"),
    ("compass", "navigating in fog"),
    ("seed drill", "sowing grain in straight rows"),
    ("lathe", "turning wooden bowls"),
    ("heliograph", "signalling across valleys"),
];

pub(crate) struct Province {
    pub name: String,
    pub capital: String,
    pub population: u32,
    pub area: u32,
    pub peak: String,
}

pub(crate) struct River {
    /// "Velna River".
    pub title: String,
    /// "Velna".
    pub short: String,
    pub length: u32,
    /// "Mount Kelvar" and "Kelvar".
    pub source: (String, String),
    /// "Sea of Brell" and "Brell".
    pub mouth: (String, String),
}

pub(crate) struct City {
    pub name: String,
    pub founded: u32,
    pub population: u32,
    pub river: Option<usize>,
    pub province: String,
    pub elevation: u32,
}

pub(crate) struct Person {
    pub name: String,
    pub family: String,
    pub female: bool,
    pub birth: u32,
    pub death: u32,
    pub birthplace: String,
    pub occupation: &'static str,
    pub employer: Option<String>,
}

pub(crate) struct Org {
    /// "Halvenor Trading Company".
    pub title: String,
    pub kind: usize,
    pub founded: u32,
    pub founder: String,
    pub hq: String,
    pub employees: u32,
}

pub(crate) struct Invention {
    /// "Drovane loom".
    pub title: String,
    pub device: usize,
    pub inventor: String,
    pub year: u32,
    pub demo: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ent {
    Province(usize),
    River(usize),
    City(usize),
    Person(usize),
    Org(usize),
    Invention(usize),
}

pub(crate) struct World {
    pub provinces: Vec<Province>,
    pub rivers: Vec<River>,
    pub cities: Vec<City>,
    pub persons: Vec<Person>,
    pub orgs: Vec<Org>,
    pub inventions: Vec<Invention>,
    /// Every entity once, in the order the documents are written.
    pub order: Vec<Ent>,
    pub city_names: Vec<String>,
    pub person_names: Vec<String>,
    pub province_names: Vec<String>,
}

/// Shares of the documents per kind, in per mille: provinces, rivers, cities, persons,
/// organisations, inventions.
const SHARES: [usize; 6] = [30, 50, 200, 400, 140, 180];

fn round_to(n: u32, step: u32) -> u32 {
    (n / step).max(1) * step
}

impl World {
    /// The world and the namer that made its names (for names invented while writing).
    pub(crate) fn build(dice: &mut Dice, documents: usize) -> (World, Namer) {
        let mut counts = SHARES.map(|s| documents * s / 1000);
        let assigned: usize = counts.iter().sum();
        counts[3] += documents - assigned;
        let [n_prov, n_riv, n_city, n_pers, n_org, n_inv] = counts;
        let mut namer = Namer::default();

        // Names for things that get no document of their own, used when a kind has too
        // few documents (tiny corpora) and for background mentions.
        let spare_places: Vec<String> = (0..4).map(|_| namer.word(dice, 3, 3)).collect();

        let mut provinces: Vec<Province> = (0..n_prov)
            .map(|_| Province {
                name: namer.word(dice, 2, 3),
                capital: String::new(),
                population: round_to(dice.range(60, 4_000) * 1_000 + dice.range(0, 999), 100),
                area: round_to(dice.range(800, 42_000), 10),
                peak: format!("Mount {}", namer.word(dice, 2, 3)),
            })
            .collect();

        let rivers: Vec<River> = (0..n_riv)
            .map(|_| {
                let short = namer.word(dice, 2, 3);
                let mount = namer.word(dice, 2, 3);
                let sea = namer.word(dice, 2, 3);
                let mouth = if dice.chance(50) {
                    format!("Sea of {sea}")
                } else {
                    format!("{sea} Sea")
                };
                River {
                    title: format!("{short} River"),
                    short,
                    length: dice.range(40, 1_400),
                    source: (format!("Mount {mount}"), mount),
                    mouth: (mouth, sea),
                }
            })
            .collect();

        let mut cities: Vec<City> = Vec::with_capacity(n_city);
        let mut province_of_city: Vec<Option<usize>> = Vec::with_capacity(n_city);
        for c in 0..n_city {
            let population = match dice.weighted(&[20, 55, 25]) {
                0 => round_to(dice.range(300, 2_990), 10),
                1 => round_to(dice.range(3_000, 59_900), 100),
                _ => round_to(dice.range(60_000, 900_000), 100),
            };
            // The first cities go one to each province, so every province has a capital.
            let p = match provinces.len() {
                0 => None,
                n if c < n => Some(c),
                n => Some(dice.below(n)),
            };
            province_of_city.push(p);
            cities.push(City {
                name: namer.word(dice, 2, 3),
                founded: dice.range(880, 1_850),
                population,
                river: (!rivers.is_empty() && dice.chance(85)).then(|| dice.below(rivers.len())),
                province: match p {
                    Some(p) => provinces[p].name.clone(),
                    None => dice.pick(&spare_places).clone(),
                },
                elevation: dice.range(2, 1_900),
            });
        }
        for (i, prov) in provinces.iter_mut().enumerate() {
            let own: Vec<usize> = (0..cities.len())
                .filter(|&c| province_of_city[c] == Some(i))
                .collect();
            prov.capital = if own.is_empty() {
                namer.word(dice, 3, 3)
            } else {
                cities[*dice.pick(&own)].name.clone()
            };
        }
        let city_names: Vec<String> = if cities.is_empty() {
            spare_places.clone()
        } else {
            cities.iter().map(|c| c.name.clone()).collect()
        };

        // People: a shared pool of given and family names, full names unique.
        let given: Vec<String> = (0..(n_pers / 4).max(6))
            .map(|_| namer.word(dice, 2, 3))
            .collect();
        let mut families: Vec<String> = (0..(n_pers * 2 / 3).max(6))
            .map(|_| namer.word(dice, 2, 3))
            .collect();
        let mut persons: Vec<Person> = Vec::with_capacity(n_pers);
        for _ in 0..n_pers {
            let mut tries = 0;
            let (name, family) = loop {
                let g = dice.pick(&given).clone();
                let f = dice.pick(&families).clone();
                let full = format!("{g} {f}");
                if namer.claim(&full) {
                    break (full, f);
                }
                tries += 1;
                if tries > 20 {
                    families.push(namer.word(dice, 3, 3));
                }
            };
            let birth = dice.range(1_580, 1_920);
            persons.push(Person {
                name,
                family,
                female: dice.chance(50),
                birth,
                death: birth + dice.range(28, 96),
                birthplace: dice.pick(&city_names).clone(),
                occupation: dice.word(OCCUPATIONS),
                employer: None,
            });
        }
        let spare_person = format!("{} {}", namer.word(dice, 2, 2), namer.word(dice, 3, 3));
        let person_names: Vec<String> = if persons.is_empty() {
            vec![spare_person.clone()]
        } else {
            persons.iter().map(|p| p.name.clone()).collect()
        };

        // Organisations are founded within their founder's life.
        let orgs: Vec<Org> = (0..n_org)
            .map(|_| {
                let kind = dice.below(ORG_KINDS.len());
                let (founder, founded) = if persons.is_empty() {
                    (spare_person.clone(), dice.range(1_600, 1_950))
                } else {
                    let p = &persons[dice.below(persons.len())];
                    (
                        p.name.clone(),
                        dice.range(p.birth + 20, p.death.max(p.birth + 21) - 1),
                    )
                };
                Org {
                    title: format!("{} {}", namer.word(dice, 2, 3), ORG_KINDS[kind].0),
                    kind,
                    founded,
                    founder,
                    hq: dice.pick(&city_names).clone(),
                    employees: match dice.weighted(&[50, 40, 10]) {
                        0 => dice.range(12, 950),
                        1 => round_to(dice.range(1_000, 9_900), 10),
                        _ => round_to(dice.range(10_000, 48_000), 100),
                    },
                }
            })
            .collect();

        // Employment: an organisation that existed during the person's working life.
        for p in persons.iter_mut() {
            if orgs.is_empty() || !dice.chance(70) {
                continue;
            }
            for _ in 0..12 {
                let o = &orgs[dice.below(orgs.len())];
                if o.founded + 5 < p.death && o.founder != p.name {
                    p.employer = Some(o.title.clone());
                    break;
                }
            }
        }

        let inventions: Vec<Invention> = (0..n_inv)
            .map(|_| {
                let device = dice.below(DEVICES.len());
                let (inventor, year) = if persons.is_empty() {
                    (spare_person.clone(), dice.range(1_600, 1_950))
                } else {
                    let p = &persons[dice.below(persons.len())];
                    (
                        p.name.clone(),
                        dice.range(p.birth + 18, p.death.max(p.birth + 19) - 1),
                    )
                };
                Invention {
                    title: format!("{} {}", namer.word(dice, 2, 3), DEVICES[device].0),
                    device,
                    inventor,
                    year,
                    demo: dice.pick(&city_names).clone(),
                }
            })
            .collect();

        let mut order: Vec<Ent> = Vec::with_capacity(documents);
        order.extend((0..n_prov).map(Ent::Province));
        order.extend((0..n_riv).map(Ent::River));
        order.extend((0..n_city).map(Ent::City));
        order.extend((0..n_pers).map(Ent::Person));
        order.extend((0..n_org).map(Ent::Org));
        order.extend((0..n_inv).map(Ent::Invention));
        dice.shuffle(&mut order);

        let province_names = if provinces.is_empty() {
            spare_places
        } else {
            provinces.iter().map(|p| p.name.clone()).collect()
        };
        let world = World {
            provinces,
            rivers,
            cities,
            persons,
            orgs,
            inventions,
            order,
            city_names,
            person_names,
            province_names,
        };
        (world, namer)
    }
}
